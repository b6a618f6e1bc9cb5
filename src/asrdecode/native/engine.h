// asrdecode native CPU search engine: the reusable pieces of every beam search.
//
// Hypotheses live in the same [B, S] arrays as the tensor engine's state (one row of S slots per
// utterance, structure of arrays: scores, last token, prefix hash, ... each a contiguous [B, S]
// array), so Python hands the tensors' memory to the engine without a copy. This header holds
// what the CTC prefix beam search, the WFST token passing and the transducer beam searches share:
//
//   * extend_hash: the incremental 62-bit prefix hash of asrdecode.beam_hyps (same arithmetic);
//   * log_add_exp: torch.logaddexp's formula;
//   * Automaton / automaton_score: a BackoffAutomaton (n-gram LM, boosting tree) read directly
//     from its arrays (dense resolved rows, CSR arcs sorted by label, backoff chain), with the
//     same float32 arithmetic as the tensor version;
//   * exp_poly / exp_poly4 / sum_exp_shifted: a polynomial float32 exp (SSE2 on x86-64), and
//     report: the C ABI's error-message convention;
//   * TopK: a bounded selection of the best candidates with a deterministic tie rule (higher
//     score first, then lower candidate index), so results never depend on a sort's stability.
//
// Everything is header-only, C++17, no dependencies; the C ABI lives in the .cpp files.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <functional>
#include <limits>
#include <vector>

#include "abi.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace asrd {

// ---------------------------------------------------------------------------------------- hashing
constexpr int64_t kHashM1 = 2147483647;  // 2**31 - 1
constexpr int64_t kHashM2 = 2147483629;
constexpr int64_t kHashP1 = 1000003;
constexpr int64_t kHashP2 = 999983;
constexpr int64_t kHashLow = (int64_t(1) << 32) - 1;

// x mod m in [0, m) (torch.remainder's sign rule, so any int64 hash extends as the tensor engine extends it).
inline int64_t floor_mod(int64_t x, int64_t m) {
  const int64_t r = x % m;
  return r < 0 ? r + m : r;
}

// Hash of prefix h extended by token (asrdecode.beam_hyps.extend_hash, two moduli packed in 62 bits).
inline int64_t extend_hash(int64_t h, int64_t token) {
  const int64_t h1 = floor_mod((h >> 32) * kHashP1 + token + 1, kHashM1);
  const int64_t h2 = floor_mod((h & kHashLow) * kHashP2 + token + 1, kHashM2);
  return static_cast<int64_t>((static_cast<uint64_t>(h1) << 32) | static_cast<uint64_t>(h2));
}

// Whether h is a hash extend_hash makes (both residues in range): what a carried state's hashes must be.
inline bool valid_hash(int64_t h) { return h >= 0 && (h >> 32) < kHashM1 && (h & kHashLow) < kHashM2; }

// ----------------------------------------------------------------------------------- arithmetic
template <typename T>
inline T neg_inf() { return -std::numeric_limits<T>::infinity(); }

// A fusion model's score s at weight w: s * w, except that -inf (the model forbids the token: a word a
// lexicon-mode LM cannot spell) stays -inf at a weight <= 0, where the product would be +inf or NaN
// (fusion.py's weigh; the oracles' too).
template <typename T>
inline T weigh(T s, T w) { return (s == neg_inf<T>() && !(w > T(0))) ? s : s * w; }

// acc + weigh(s, w) with the product and the sum rounded once (std::fma), by the same rule.
template <typename T>
inline T weigh_add(T s, T w, T acc) { return (s == neg_inf<T>() && !(w > T(0))) ? s : std::fma(w, s, acc); }

// torch.logaddexp's formula (equal infinities pass through).
template <typename T>
inline T log_add_exp(T a, T b) {
  if (std::isinf(a) && a == b) return a;
  T m = std::max(a, b);
  return m + std::log1p(std::exp(-std::abs(a - b)));
}

// exp(x) in float32 for x clamped to [-87, 88] (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2,
// degree-7 polynomial, times 2^n); below -87 the true value (< 2e-38) is immaterial here. A NaN counts as
// -87 (callers flag NaNs themselves; converting it to an int would be undefined).
inline float exp_poly(float x) {
  x = x >= -87.0f ? (x > 88.0f ? 88.0f : x) : -87.0f;
  const float fx = x * 1.44269504088896341f;
  const int32_t n = static_cast<int32_t>(fx < 0.0f ? fx - 0.5f : fx + 0.5f);
  const float nf = static_cast<float>(n);
  const float r = (x - nf * 0.693359375f) + nf * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#if defined(__SSE2__)
// exp_poly on four lanes (rounding to nearest by the default MXCSR mode).
inline __m128 exp_poly4(__m128 x) {
  x = _mm_min_ps(_mm_max_ps(x, _mm_set1_ps(-87.0f)), _mm_set1_ps(88.0f));
  const __m128i n = _mm_cvtps_epi32(_mm_mul_ps(x, _mm_set1_ps(1.44269504088896341f)));
  const __m128 nf = _mm_cvtepi32_ps(n);
  const __m128 r = _mm_add_ps(_mm_sub_ps(x, _mm_mul_ps(nf, _mm_set1_ps(0.693359375f))),
                              _mm_mul_ps(nf, _mm_set1_ps(2.12194440e-4f)));
  __m128 p = _mm_set1_ps(1.9875691500e-4f);
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.3981999507e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(8.3334519073e-3f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(4.1665795894e-2f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(1.6666665459e-1f));
  p = _mm_add_ps(_mm_mul_ps(p, r), _mm_set1_ps(5.0000001201e-1f));
  p = _mm_add_ps(_mm_add_ps(_mm_mul_ps(p, _mm_mul_ps(r, r)), r), _mm_set1_ps(1.0f));
  const __m128i bits = _mm_slli_epi32(_mm_add_epi32(n, _mm_set1_epi32(127)), 23);
  return _mm_mul_ps(p, _mm_castsi128_ps(bits));
}
#endif

#if defined(__x86_64__)
#define ASRD_EXP8 1
// exp_poly4 on eight lanes: the same operations lane by lane (AVX2 without FMA: no product is fused).
__attribute__((target("avx2"))) inline __m256 exp_poly8(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256i n = _mm256_cvtps_epi32(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)));
  const __m256 nf = _mm256_cvtepi32_ps(n);
  const __m256 r = _mm256_add_ps(_mm256_sub_ps(x, _mm256_mul_ps(nf, _mm256_set1_ps(0.693359375f))),
                                 _mm256_mul_ps(nf, _mm256_set1_ps(2.12194440e-4f)));
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(p, _mm256_mul_ps(r, r)), r), _mm256_set1_ps(1.0f));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// sum_exp_shifted's four-lane accumulation over the first `n8` (a multiple of 8) values, the exps eight at a
// time: each eight's low four added to the lanes, then its high four, as four-lane steps add them.
__attribute__((target("avx2"))) inline __m128 sum_exp_lanes8(const float* x, int64_t n8, float shift) {
  __m128 acc = _mm_setzero_ps();
  const __m256 sh = _mm256_set1_ps(shift);
  for (int64_t i = 0; i < n8; i += 8) {
    const __m256 e = exp_poly8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    acc = _mm_add_ps(acc, _mm256_castps256_ps128(e));
    acc = _mm_add_ps(acc, _mm256_extractf128_ps(e, 1));
  }
  return acc;
}

inline bool has_avx2() {
  static const bool have = (__builtin_cpu_init(), __builtin_cpu_supports("avx2"));
  return have;
}
#endif

// sum_i exp(x[i] - shift) over x [n] (float32): four lanes at a time with exp_poly4 on x86-64 (arguments
// clamped to [-87, 88], so exp(-inf) counts as ~1e-38; with AVX2 the exps of eight values at once, added
// four by four in the same order), std::exp elsewhere. Summed in float.
inline float sum_exp_shifted(const float* x, int64_t n, float shift) {
  int64_t i = 0;
  float total = 0.0f;
#if defined(__SSE2__)
  __m128 acc = _mm_setzero_ps();
  const __m128 sh = _mm_set1_ps(shift);
#if defined(ASRD_EXP8)
  if (has_avx2()) {
    i = n / 8 * 8;
    acc = sum_exp_lanes8(x, i, shift);
  }
#endif
  for (; i + 4 <= n; i += 4) acc = _mm_add_ps(acc, exp_poly4(_mm_sub_ps(_mm_loadu_ps(x + i), sh)));
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, acc);
  total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
#endif
  for (; i < n; ++i) total += std::exp(x[i] - shift);
  return total;
}

// The largest of x [n] as the loop `m = std::max(m, x[i])` from -inf finds it (NaNs skipped, -inf for none):
// four lanes at a time on x86-64 (the maximum of the same values; only a zero maximum could differ, in its
// sign, so that one is found by the loop itself).
inline float max_of(const float* x, int64_t n) {
  float mx = neg_inf<float>();
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 acc = _mm_set1_ps(mx);
  for (; i + 4 <= n; i += 4) acc = _mm_max_ps(_mm_loadu_ps(x + i), acc);  // a NaN lane of x keeps acc's
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, acc);
  for (float v : lanes) mx = std::max(mx, v);
#endif
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == 0.0f) {
    mx = neg_inf<float>();
    for (i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  }
  return mx;
}

// The C ABI's error convention: 0 for no message, else 1 with the message copied (truncated) into `err`.
inline int report(const std::string& msg, char* err, int64_t err_len) {
  if (msg.empty()) return 0;
  if (err && err_len > 0) {
    std::strncpy(err, msg.c_str(), static_cast<size_t>(err_len - 1));
    err[err_len - 1] = '\0';
  }
  return 1;
}

// ------------------------------------------------------------------------------ fusion automata

// Score and next state of `label` from `state`: walk the backoff chain to the first state with
// an arc for it or a dense row (terminals always have one), adding backoff weights in float32 in
// chain order, exactly as BackoffAutomaton.advance does. Returns false for a state out of range.
inline bool automaton_score(const Automaton& a, int64_t state, int64_t label, float* score, int64_t* next) {
  if (state < 0 || state >= a.num_states) return false;
  if (label == a.blank) {
    *score = 0.0f;
    *next = state;
    return true;
  }
  int64_t cur = state;
  float acc = 0.0f;
  for (int64_t guard = 0; guard <= a.num_states; ++guard) {
    const int64_t d = a.dense_index[cur];
    if (d >= 0) {
      *score = a.dense_scores[d * a.vocab + label] + acc;
      *next = a.dense_next[d * a.vocab + label];
      return true;
    }
    const int64_t* lo = a.arc_label + a.arc_offsets[cur];
    const int64_t* hi = a.arc_label + a.arc_offsets[cur + 1];
    const int64_t* it = std::lower_bound(lo, hi, label);
    if (it != hi && *it == label) {
      const int64_t k = it - a.arc_label;
      *score = a.arc_weight[k] + acc;
      *next = a.arc_dest[k];
      return true;
    }
    acc = acc + a.backoff_weight[cur];
    cur = a.backoff_state[cur];
  }
  return false;  // a chain without a dense state (cannot happen for a valid automaton)
}

// ------------------------------------------------------------------------------- word n-gram LM

// ln p(label | lm state) and the next word-LM state: the back-off chain walked on arcs only, as
// WordNGramLM._word_score (float32, backoff weights added in chain order).
inline bool word_lm_label_score(const Automaton& a, int64_t state, int64_t label, float root_fill, float* score,
                                int64_t* next) {
  if (state < 0 || state >= a.num_states) return false;
  int64_t cur = state;
  float acc = 0.0f;
  for (int64_t guard = 0; guard <= a.num_states; ++guard) {
    const int64_t* lo = a.arc_label + a.arc_offsets[cur];
    const int64_t* hi = a.arc_label + a.arc_offsets[cur + 1];
    const int64_t* it = std::lower_bound(lo, hi, label);
    if (it != hi && *it == label) {
      const int64_t k = it - a.arc_label;
      *score = acc + a.arc_weight[k];
      *next = a.arc_dest[k];
      return true;
    }
    if (a.backoff_state[cur] == cur) break;  // the root: no arc for it anywhere
    acc = acc + a.backoff_weight[cur];
    cur = a.backoff_state[cur];
  }
  *score = root_fill;
  *next = state;
  return true;
}

// Score of ending the open word at `node` (minus what it already received) and the LM state after it
// (WordNGramLM._word_end): nothing for the empty word (node 0).
inline bool word_lm_end(const WordLM& w, int64_t lm, int64_t node, float* score, int64_t* lm_after) {
  if (node == 0) {
    *score = 0.0f;
    *lm_after = lm;
    return lm >= 0 && lm < w.lm.num_states;
  }
  float sc;
  if (!word_lm_label_score(w.lm, lm, w.end_label[node], w.lm_root_fill, &sc, lm_after)) return false;
  *score = sc + w.end_const[node];
  return true;
}

// Score and next state of `label` from `state` (WordNGramLM.advance's entry); false for a state out of range.
inline bool word_lm_score(const WordLM& w, int64_t state, int64_t label, float* score, int64_t* next) {
  if (state < 0) return false;
  const int64_t lm = state >> w.node_bits, node = state & ((int64_t(1) << w.node_bits) - 1);
  if (node >= w.trie.num_states || lm >= w.lm.num_states) return false;
  if (label != w.trie.blank && w.is_start[label]) {
    float end;
    int64_t after;
    if (!word_lm_end(w, lm, node, &end, &after)) return false;
    *score = end + w.start_score[label];
    *next = (after << w.node_bits) | w.start_node[label];
    return true;
  }
  float sc;
  int64_t nx;
  if (!automaton_score(w.trie, node, label, &sc, &nx)) return false;
  *score = sc;
  *next = (lm << w.node_bits) | nx;
  return true;
}

// End-of-sentence score of `state` (WordNGramLM.final): the open word's end plus ln p(</s> | history).
inline bool word_lm_final(const WordLM& w, int64_t state, float* score) {
  if (state < 0) return false;
  const int64_t lm = state >> w.node_bits, node = state & ((int64_t(1) << w.node_bits) - 1);
  if (node >= w.trie.num_states || lm >= w.lm.num_states) return false;
  float end;
  int64_t after;
  if (!word_lm_end(w, lm, node, &end, &after)) return false;
  *score = end + w.lm.final_weight[after];
  return true;
}

// ------------------------------------------------------------------------------------- top-k
// The `capacity` best candidates seen so far: higher value first, ties to the lower index.
// A binary min-heap on (value, -index); push is O(log k), rejection of a losing candidate O(1).
template <typename T, typename Payload>
class TopK {
 public:
  struct Item {
    T value;
    int64_t index;
    Payload payload;
  };

  void reset(int64_t capacity) {
    cap_ = capacity;
    heap_.clear();
    heap_.reserve(static_cast<size_t>(capacity));
  }
  bool full() const { return static_cast<int64_t>(heap_.size()) >= cap_; }
  // The value a candidate must beat to enter (when full).
  T worst_value() const { return heap_.front().value; }
  // Would (value, index) enter?
  bool admits(T value, int64_t index) const {
    if (!full()) return true;
    const Item& w = heap_.front();
    return value > w.value || (value == w.value && index < w.index);
  }
  void push(T value, int64_t index, const Payload& payload) {
    if (cap_ <= 0) return;
    if (!full()) {
      heap_.push_back(Item{value, index, payload});
      std::push_heap(heap_.begin(), heap_.end(), worse_last);
    } else if (admits(value, index)) {
      std::pop_heap(heap_.begin(), heap_.end(), worse_last);
      heap_.back() = Item{value, index, payload};
      std::push_heap(heap_.begin(), heap_.end(), worse_last);
    }
  }
  // The kept items, best first (the heap is consumed).
  std::vector<Item>& sorted() {
    std::sort(heap_.begin(), heap_.end(), better);
    return heap_;
  }

  static bool better(const Item& a, const Item& b) {
    return a.value > b.value || (a.value == b.value && a.index < b.index);
  }

 private:
  // heap order: the worst item at the front
  static bool worse_last(const Item& a, const Item& b) { return better(a, b); }
  int64_t cap_ = 0;
  std::vector<Item> heap_;
};

// ------------------------------------------------------------------------------ token selection
// Token order of one frame: higher log-prob first, ties to the lower id.
template <typename T>
struct TokenBetter {
  const T* e;
  bool operator()(int64_t a, int64_t b) const { return e[a] > e[b] || (e[a] == e[b] && a < b); }
};

// The `m` best tokens of one frame's log-probs `e [V]` other than `blank`, best first, into `out`:
// the m-th largest value by selection on a copy (linear time), then the tokens above it and, in
// id order, those equal to it, sorted.
template <typename T>
inline void top_tokens(const T* e, int64_t vocab, int64_t blank, int64_t m, std::vector<T>& values,
                       std::vector<int64_t>& out) {
  const TokenBetter<T> better{e};
  const bool has_blank = blank >= 0 && blank < vocab;
  const int64_t n = std::min<int64_t>(m, has_blank ? vocab - 1 : vocab);
  out.clear();
  if (n <= 0) return;
  values.clear();
  for (int64_t v = 0; v < vocab; ++v)
    if (v != blank) values.push_back(e[v]);
  std::nth_element(values.begin(), values.begin() + (n - 1), values.end(), std::greater<T>());
  const T th = values[static_cast<size_t>(n - 1)];
  for (int64_t v = 0; v < vocab; ++v)
    if (v != blank && e[v] > th) out.push_back(v);
  for (int64_t v = 0; v < vocab && static_cast<int64_t>(out.size()) < n; ++v)
    if (v != blank && e[v] == th) out.push_back(v);
  std::sort(out.begin(), out.end(), better);
}

}  // namespace asrd

namespace asrd {

// ------------------------------------------------------------------------------ backpointer tree
// The token sequence (and the integer stored with each token) of hypothesis `slot` of utterance `b`
// after the last of `steps` recorded steps tok/par/dat [steps, B, K] (asrdecode.beam_hyps.BeamTree):
// walks the parents back, keeps the steps whose token is >= 0. Writes at most `steps` entries to
// out_tok / out_dat in order; returns their number.
inline int64_t backtrack_one(const int64_t* tok, const int64_t* par, const int64_t* dat, int64_t steps, int64_t B,
                             int64_t K, int64_t b, int64_t slot, int64_t* out_tok, int64_t* out_dat) {
  int64_t n = 0, cur = slot;
  for (int64_t s = steps - 1; s >= 0; --s) {
    if (cur < 0 || cur >= K) return -1;
    const int64_t at = (s * B + b) * K + cur;
    if (tok[at] >= 0) {
      out_tok[n] = tok[at];
      out_dat[n] = dat[at];
      ++n;
    }
    cur = par[at];
  }
  std::reverse(out_tok, out_tok + n);
  std::reverse(out_dat, out_dat + n);
  return n;
}

}  // namespace asrd
