// The CTC prefix beam search on the native engine: the frame loop of asrdecode.ctc.beam._Stepper.core,
// one utterance at a time, reading and writing the CTCBeamState arrays in place.
//
// Same algorithm, same arithmetic order as the tensor step (see ctc/beam.py): stays, extensions
// (the repeated last token only from paths ending in blank), merging of an extension into the
// hypothesis it equals (found by parent hash), the `peak` / relink timestamp rule, the candidate
// tokens (all, the token_beam best, or the 2*beam best without fusion), the beam threshold.
// Candidates are indexed as in the tensor step ([stays K | extensions K x M]); the K best are
// kept, higher score first, ties to the lower index.
#include <cstring>
#include <string>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "engine.h"
#include "guard.h"

namespace {

using asrd::Automaton;
using asrd::CollapseArgs;
using asrd::CtcBeamArgs;
using asrd::CtcDecodeArgs;
using asrd::CtcFinalArgs;
using asrd::FusionDesc;



constexpr int64_t kInlineModels = 4;  // fusion scores kept with a candidate (more: looked up again)

struct Cand {
  int64_t src;  // slot of the hypothesis it comes from
  int64_t tok;  // -1: a stay, else the appended token
  double score[kInlineModels];  // extension: each model's score of tok (exact in double) ...
  int64_t next[kInlineModels];  // ... and next state
};

template <typename T>
class CtcBeam {
 public:
  explicit CtcBeam(const CtcBeamArgs& a) : a_(a), K_(a.beam), V_(a.vocab), NM_(a.num_models) {
    const size_t K = static_cast<size_t>(K_);
    p_tot_.resize(K); e_last_.resize(K); bonus_.resize(K); bonus1_.resize(K);
    stay_b_.resize(K); stay_nb_.resize(K); stay_peak_.resize(K);
    later_peak_.resize(K); parent_.resize(K); has_parent_.resize(K);
    o_pb_.resize(K); o_pnb_.resize(K); o_fs_.resize(K); o_len_.resize(K); o_last_.resize(K);
    o_hash_.resize(K); o_phash_.resize(K); o_fst_.resize(K * static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    child_mark_.assign(static_cast<size_t>(V_), -1);
    cand_mark_.assign(static_cast<size_t>(V_), -1);
    sc_.resize(static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    nx_.resize(static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    bound_ok_ = true;
    for (int64_t i = 0; i < NM_; ++i)
      bound_ok_ = bound_ok_ && a.models[i].kind != 1 && a.models[i].nonpositive && a.models[i].weight >= 0.0;
    beta_ = static_cast<T>(a.beta);
    thr_ = static_cast<T>(a.threshold);
    for (int64_t i = 0; i < NM_; ++i) w_.push_back(static_cast<T>(a.models[i].weight));
  }

  // Frame t of utterance b is frame frame_src[b * frames + t] of x (and that is its time): the kept
  // frames of a blank collapse done in place. Null (the default): frame t, time frame_index.
  void set_frame_source(const int64_t* frame_src) { frame_src_ = frame_src; }

  // Runs frames [t_begin, t_end) of every utterance; returns an error message or "".
  std::string run() {
    const int64_t B = a_.batch;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = a_.t_begin; t < a_.t_end; ++t) {
        int64_t* tok_rec = a_.tok_out + ((t - a_.t_begin) * B + b) * K_;
        int64_t* par_rec = a_.par_out + ((t - a_.t_begin) * B + b) * K_;
        int64_t* dat_rec = a_.dat_out + ((t - a_.t_begin) * B + b) * K_;
        const int64_t src = frame_src_ ? frame_src_[b * a_.frames + t] : t;  // frame of x
        const int64_t time = frame_src_ || !a_.frame_index ? src : a_.frame_index[b * a_.frames + t];
        for (int64_t j = 0; j < K_; ++j) dat_rec[j] = time;
        if (t >= a_.lengths[b]) {  // this utterance has no such frame: state kept
          for (int64_t j = 0; j < K_; ++j) { tok_rec[j] = -1; par_rec[j] = j; }
          continue;
        }
        const T* e = static_cast<const T*>(a_.x) + b * a_.x_stride + src * V_;
        std::string err = step(b, e, tok_rec, par_rec);
        if (!err.empty()) return err;
      }
    }
    return "";
  }

 private:
  // Score of token `tok` for slot `j` of utterance `b` for model i; false on an invalid state.
  bool model_score(int64_t i, int64_t b, int64_t j, int64_t state, int64_t tok, T* score, int64_t* next) {
    const FusionDesc& m = a_.models[i];
    if (m.kind == 0 || m.kind == 2) {
      float s;
      const bool ok = m.kind == 0 ? asrd::automaton_score(m.automaton, state, tok, &s, next)
                                  : asrd::word_lm_score(*m.word, state, tok, &s, next);
      if (!ok) return false;
      *score = static_cast<T>(s);
      return true;
    }
    const int64_t row = (b * K_ + j) * V_ + tok;
    *score = static_cast<const T*>(m.rows_scores)[row];
    *next = m.rows_next[row];
    return true;
  }

  // The [K] rows of utterance b's state arrays.
  struct Rows {
    T *p_b, *p_nb, *fscore, *length, *peak;
    int64_t *last, *hsh, *phash, *fst;
  };

  Rows rows_of(int64_t b) const {
    const int64_t o = b * K_;
    return Rows{static_cast<T*>(a_.p_b) + o, static_cast<T*>(a_.p_nb) + o, static_cast<T*>(a_.fscore) + o,
                static_cast<T*>(a_.length) + o, static_cast<T*>(a_.peak) + o, a_.last + o, a_.hash + o,
                a_.parent_hash + o, a_.fstates + o * NM_};
  }

  // One frame e [V] of utterance b: candidate tokens, per-slot totals and parents, stays, extensions,
  // then the K best written over the state (tree records into tok_rec / par_rec [K]).
  std::string step(int64_t b, const T* e, int64_t* tok_rec, int64_t* par_rec) {
    const Rows r = rows_of(b);
    ++stamp_;
    e_ = e;
    const int64_t M = candidate_tokens(e);
    slot_totals(r, e);
    stays(r, e);
    std::string err = extensions(b, r, e, M);
    if (!err.empty()) return err;
    return write_beam(b, r, e, tok_rec, par_rec);
  }

  // Candidate tokens of this frame into toks_; returns M, the width of a parent's candidate block.
  // (Scored best first when fusion can only lower a score: a parent's remaining tokens are then
  // skipped as soon as one fails to enter the top K. Over the whole vocabulary the sorted order is
  // built lazily: the likely tokens, then 16 more at a time, as far as some parent's scan goes.)
  int64_t candidate_tokens(const T* e) {
    if (a_.num_tokens <= 0) {
      if (bound_ok_) {
        likely_tokens(e);
      } else {
        toks_.clear();
        for (int64_t v = 0; v < V_; ++v)
          if (v != a_.blank) toks_.push_back(v);
      }
      return V_;
    }
    best_tokens(e, a_.num_tokens);
    const int64_t M = static_cast<int64_t>(toks_.size());
    for (int64_t m = 0; m < M; ++m) cand_mark_[static_cast<size_t>(toks_[m])] = stamp_;
    return M;
  }

  // Per-slot totals, the emission of each slot's last token, the length bonuses, and the parent of each
  // hypothesis in the beam (the first slot whose hash is its parent hash).
  void slot_totals(const Rows& r, const T* e) {
    for (int64_t j = 0; j < K_; ++j) {
      p_tot_[j] = asrd::log_add_exp(r.p_b[j], r.p_nb[j]);
      e_last_[j] = e[r.last[j] < 0 ? 0 : r.last[j]];
      if (beta_ != T(0)) {
        bonus_[j] = r.fscore[j] + beta_ * r.length[j];
        bonus1_[j] = bonus_[j] + beta_;
      } else {
        bonus_[j] = r.fscore[j];
        bonus1_[j] = r.fscore[j];
      }
    }
    for (int64_t i = 0; i < K_; ++i) {
      parent_[i] = 0;
      has_parent_[i] = 0;
      for (int64_t j = 0; j < K_; ++j) {
        if (r.hsh[j] == r.phash[i]) { parent_[i] = j; has_parent_[i] = 1; break; }
      }
    }
  }

  // The stays (with merged arrivals of children already in the beam) into the heap.
  void stays(const Rows& r, const T* e) {
    const T ninf = asrd::neg_inf<T>();
    const bool all_tokens = a_.num_tokens <= 0;
    heap_.reset(K_);
    const T e_blank = e[a_.blank];
    for (int64_t i = 0; i < K_; ++i) {
      const int64_t li = r.last[i];
      const bool last_in = all_tokens ? li >= 0 : (li >= 0 && cand_mark_[static_cast<size_t>(li)] == stamp_);
      const bool child_in = has_parent_[i] && last_in;
      const bool merge = a_.merge_all ? bool(has_parent_[i]) : child_in;
      T sb = p_tot_[i] + e_blank;
      T snb = r.p_nb[i] + e_last_[i];
      T pk = r.peak[i];
      later_peak_[i] = 0;
      if (merge) {
        const int64_t j = parent_[i];
        const T par_from = r.last[j] == li ? r.p_b[j] : p_tot_[j];
        const T arrival = par_from + e_last_[i];
        snb = asrd::log_add_exp(snb, arrival);
        if (arrival > pk) { pk = arrival; later_peak_[i] = 1; }
      }
      stay_b_[i] = sb;
      stay_nb_[i] = snb;
      stay_peak_[i] = pk;
      const T v = asrd::log_add_exp(sb, snb) + bonus_[i];
      if (v > ninf) heap_.push(v, i, Cand{i, -1, {}, {}});
    }
  }

  // The extensions into the heap, best parents first, each parent's tokens in toks_ order.
  std::string extensions(int64_t b, const Rows& r, const T* e, int64_t M) {
    const bool all_tokens = a_.num_tokens <= 0;
    const bool lazy = all_tokens && bound_ok_;
    order_.clear();
    for (int64_t j = 0; j < K_; ++j)
      if (p_tot_[j] > asrd::neg_inf<T>()) order_.push_back(j);
    std::sort(order_.begin(), order_.end(), [this](int64_t a, int64_t c) {
      const T va = p_tot_[a] + bonus1_[a], vc = p_tot_[c] + bonus1_[c];
      return va > vc || (va == vc && a < c);
    });
    for (const int64_t j : order_) {
      ++stamp_child_;
      for (int64_t i = 0; i < K_; ++i)
        if (has_parent_[i] && parent_[i] == j && r.last[i] >= 0)
          child_mark_[static_cast<size_t>(r.last[i])] = stamp_child_;
      for (size_t q = 0;; ++q) {
        if (q >= toks_.size() && !(lazy && next_sorted())) break;
        const int64_t tok = toks_[q];
        const int res = consider(b, r, e, j, tok, K_ + j * M + (all_tokens ? tok : static_cast<int64_t>(q)));
        if (res < 0) return bad_state(-1 - res, r.fst[j * NM_ + (-1 - res)]);
        if (res == 0) break;
      }
    }
    return "";
  }

  // One candidate: parent j extended by `tok` (candidate index `index`) into the heap. Returns 1, 0 when
  // the scan of a sorted token list may stop (this and every later token fails to enter), or -1 - i for
  // an invalid state of fusion model i.
  __attribute__((always_inline)) int consider(int64_t b, const Rows& r, const T* e, int64_t j, int64_t tok,
                                             int64_t index) {
    const T ninf = asrd::neg_inf<T>();
    if (tok == a_.blank || child_mark_[static_cast<size_t>(tok)] == stamp_child_) return 1;
    const bool own = tok == r.last[j];
    const T ac = own ? (r.p_b[j] + e_last_[j]) + bonus1_[j] : (p_tot_[j] + bonus1_[j]) + e[tok];
    if (!(ac > ninf) || (bound_ok_ && !heap_.admits(ac, index)))  // fusion only lowers it
      return (bound_ok_ && !own) ? 0 : 1;  // later tokens have lower log-probs
    T v = ac;
    Cand c{j, tok, {}, {}};
    if (NM_) {
      const int64_t* fs_j = r.fst + j * NM_;
      T lm = T(0);
      for (int64_t k = 0; k < NM_; ++k) {
        T sc;
        int64_t nx;
        if (!model_score(k, b, j, fs_j[k], tok, &sc, &nx)) return static_cast<int>(-1 - k);
        if (own)
          lm = k == 0 ? asrd::weigh(sc, w_[k]) : lm + asrd::weigh(sc, w_[k]);
        else
          v = asrd::weigh_add(sc, w_[k], v);
        if (k < kInlineModels) {
          c.score[k] = static_cast<double>(sc);
          c.next[k] = nx;
        }
      }
      if (own) v = ac + lm;
    }
    if (v > ninf) heap_.push(v, index, c);
    return 1;
  }

  // The K best candidates written over the state (copies of the old state first), with the tree records.
  std::string write_beam(int64_t b, const Rows& r, const T* e, int64_t* tok_rec, int64_t* par_rec) {
    const T ninf = asrd::neg_inf<T>();
    for (int64_t j = 0; j < K_; ++j) {
      o_pb_[j] = r.p_b[j]; o_pnb_[j] = r.p_nb[j]; o_fs_[j] = r.fscore[j]; o_len_[j] = r.length[j];
      o_last_[j] = r.last[j]; o_hash_[j] = r.hsh[j]; o_phash_[j] = r.phash[j];
    }
    for (int64_t q = 0; q < K_ * NM_; ++q) o_fst_[q] = r.fst[q];
    auto& best = heap_.sorted();
    const int64_t n_best = static_cast<int64_t>(best.size());
    T floor = n_best ? best[0].value - thr_ : ninf;
    const T lowest = std::numeric_limits<T>::lowest();
    if (!(floor >= lowest)) floor = lowest;
    for (int64_t k = 0; k < K_; ++k) {
      const bool filled = k < n_best;
      const int64_t src = filled ? best[k].payload.src : k;
      const int64_t tok = filled ? best[k].payload.tok : -1;
      const bool drop = !filled || best[k].value < floor;
      if (tok >= 0) {
        std::string err = write_extension(b, r, e, k, best[k].payload, drop);
        if (!err.empty()) return err;
      } else {
        write_stay(r, k, src, drop);
      }
      tok_rec[k] = tok >= 0 ? tok : (later_peak_[src] ? o_last_[src] : -1);
      par_rec[k] = tok < 0 && later_peak_[src] ? parent_[src] : src;
    }
    return "";
  }

  // Slot k := the extension c (of old slot c.src by c.tok); `drop`: below the beam threshold.
  std::string write_extension(int64_t b, const Rows& r, const T* e, int64_t k, const Cand& c, bool drop) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t src = c.src, tok = c.tok;
    const int64_t* fs_src = o_fst_.data() + src * NM_;
    const T ext_ac = (o_last_[src] == tok ? o_pb_[src] : p_tot_[src]) + e[tok];
    T lm = T(0);
    for (int64_t m = 0; m < NM_; ++m) {
      T s;
      int64_t nx;
      if (m < kInlineModels) {
        s = static_cast<T>(c.score[m]);
        nx = c.next[m];
      } else if (!model_score(m, b, src, fs_src[m], tok, &s, &nx)) {
        return bad_state(m, fs_src[m]);
      }
      lm = m == 0 ? asrd::weigh(s, w_[m]) : lm + asrd::weigh(s, w_[m]);
      nx_[static_cast<size_t>(m)] = nx;
    }
    r.p_b[k] = ninf;
    r.p_nb[k] = drop ? ninf : ext_ac;
    r.fscore[k] = NM_ ? o_fs_[src] + lm : o_fs_[src];
    r.length[k] = o_len_[src] + T(1);
    r.last[k] = tok;
    r.hsh[k] = drop ? -1 : asrd::extend_hash(o_hash_[src], tok);
    r.phash[k] = drop ? -2 : o_hash_[src];
    r.peak[k] = ext_ac;
    for (int64_t m = 0; m < NM_; ++m) r.fst[k * NM_ + m] = nx_[static_cast<size_t>(m)];
    return "";
  }

  // Slot k := the stay of old slot src.
  void write_stay(const Rows& r, int64_t k, int64_t src, bool drop) {
    const T ninf = asrd::neg_inf<T>();
    r.p_b[k] = drop ? ninf : stay_b_[src];
    r.p_nb[k] = drop ? ninf : stay_nb_[src];
    r.fscore[k] = o_fs_[src];
    r.length[k] = o_len_[src];
    r.last[k] = o_last_[src];
    r.hsh[k] = drop ? -1 : o_hash_[src];
    r.phash[k] = drop ? -2 : o_phash_[src];
    r.peak[k] = stay_peak_[src];
    if (k != src)
      for (int64_t m = 0; m < NM_; ++m) r.fst[k * NM_ + m] = o_fst_[src * NM_ + m];
  }

  // toks_ = the n best non-blank tokens of the frame e_, best first (higher log-prob, ties to the lower
  // id): one pass keeping a sorted buffer for small n, a full sort otherwise. Same order as top_tokens.
  void best_tokens(const T* e, int64_t n) {
    toks_.clear();
    const int64_t n_all = a_.blank >= 0 && a_.blank < V_ ? V_ - 1 : V_;
    if (n > n_all) n = n_all;
    if (n <= 0) return;
    if (n > kSmallSelection) {
      for (int64_t v = 0; v < V_; ++v)
        if (v != a_.blank) toks_.push_back(v);
      const asrd::TokenBetter<T> better{e};
      if (n < n_all) {
        std::nth_element(toks_.begin(), toks_.begin() + (n - 1), toks_.end(), better);
        toks_.resize(static_cast<size_t>(n));
      }
      std::sort(toks_.begin(), toks_.end(), better);
      return;
    }
    T val[kSmallSelection];
    int64_t id[kSmallSelection];
    int64_t size = 0;
    const int64_t blank = a_.blank, V = V_;
    for (int64_t v = 0; v < V; ++v) {
      if (v == blank) continue;
      const T x = e[v];
      if (size == n && !(x > val[size - 1])) continue;  // an equal value has a higher id: it loses
      int64_t i = size == n ? n - 1 : size++;
      while (i > 0 && val[i - 1] < x) { val[i] = val[i - 1]; id[i] = id[i - 1]; --i; }
      val[i] = x;
      id[i] = v;
    }
    toks_.assign(id, id + size);
  }

  // The head of the lazy sorted scan over the whole vocabulary: toks_ = the tokens whose log-prob is
  // within kLikelyMargin of the frame's best non-blank one, in the frame's token order (a max pass and a
  // compare pass, four lanes at a time for float32, then a sort of the few that pass).
  void likely_tokens(const T* e) {
    toks_.clear();
    const int64_t blank = a_.blank, V = V_;
    T mx = -std::numeric_limits<T>::infinity();
    int64_t v = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same<T, float>::value) {
      __m128 hi = _mm_set1_ps(mx);
      T group = mx;  // the blank's group of four, without the blank
      for (; v + 4 <= V; v += 4) {
        if (blank >= v && blank < v + 4) {
          for (int64_t u = v; u < v + 4; ++u)
            if (u != blank && e[u] > group) group = e[u];
        } else {
          hi = _mm_max_ps(hi, _mm_loadu_ps(e + v));
        }
      }
      alignas(16) float h[4];
      _mm_store_ps(h, hi);
      mx = std::max(std::max(std::max(h[0], h[1]), std::max(h[2], h[3])), group);
    }
#endif
    for (; v < V; ++v)
      if (v != blank && e[v] > mx) mx = e[v];
    if (!(mx > -std::numeric_limits<T>::infinity())) return;  // (every token impossible: next_sorted goes on)
    const T th = mx - static_cast<T>(kLikelyMargin);
    v = 0;
#if defined(__SSE2__)
    if constexpr (std::is_same<T, float>::value) {
      const __m128 t4 = _mm_set1_ps(th);
      for (; v + 4 <= V; v += 4) {
        int mask = _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(e + v), t4));
        while (mask) {
          const int i = __builtin_ctz(static_cast<unsigned>(mask));
          mask &= mask - 1;
          if (v + i != blank) toks_.push_back(v + i);
        }
      }
    }
#endif
    for (; v < V; ++v)
      if (v != blank && e[v] > th) toks_.push_back(v);
    std::sort(toks_.begin(), toks_.end(), asrd::TokenBetter<T>{e_});
  }

  // Continues the lazy sorted scan: appends to toks_ the kSmallSelection tokens that come next in the
  // frame's token order (after toks_.back()), by one selection pass. False when none is left.
  bool next_sorted() {
    const T* e = e_;
    const int64_t blank = a_.blank, V = V_, n = kSmallSelection;
    const bool any = !toks_.empty();
    const int64_t lt = any ? toks_.back() : -1;
    const T lv = any ? e[lt] : std::numeric_limits<T>::infinity();
    T val[kSmallSelection];
    int64_t id[kSmallSelection];
    int64_t size = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (v == blank) continue;
      const T x = e[v];
      if (any && !(x < lv || (x == lv && v > lt))) continue;  // at or before the last one taken
      if (size == n && !(x > val[size - 1])) continue;  // an equal value has a higher id: it loses
      int64_t i = size == n ? n - 1 : size++;
      while (i > 0 && val[i - 1] < x) { val[i] = val[i - 1]; id[i] = id[i - 1]; --i; }
      val[i] = x;
      id[i] = v;
    }
    toks_.insert(toks_.end(), id, id + size);
    return size > 0;
  }

  std::string bad_state(int64_t model, int64_t state) {
    return "fusion model " + std::to_string(model) + " has state " + std::to_string(state) +
           " outside its automaton";
  }

  const CtcBeamArgs& a_;
  const int64_t* frame_src_ = nullptr;
  int64_t K_, V_, NM_;
  T beta_, thr_;
  std::vector<T> w_;
  bool bound_ok_;
  int64_t stamp_ = 0, stamp_child_ = 0;
  std::vector<T> p_tot_, e_last_, bonus_, bonus1_, stay_b_, stay_nb_, stay_peak_;
  std::vector<char> later_peak_, has_parent_;
  std::vector<int64_t> parent_;
  std::vector<T> o_pb_, o_pnb_, o_fs_, o_len_;
  std::vector<int64_t> o_last_, o_hash_, o_phash_, o_fst_;
  static constexpr int64_t kSmallSelection = 16;  // tokens selected in one pass (best_tokens, next_sorted)
  static constexpr double kLikelyMargin = 4.0;   // log-prob margin of the lazy scan's head (e^-4)
  std::vector<int64_t> child_mark_, cand_mark_, scratch_, toks_, order_;
  const T* e_ = nullptr;
  std::vector<T> sc_, values_;
  std::vector<int64_t> nx_;
  asrd::TopK<T, Cand> heap_;
};

}  // namespace

// Blank collapse of one chunk of a stream (asrdecode.ctc.collapse.stream_collapse, same rules):
// a valid blank frame is dropped when the frame before it (or the stream's last frame, for the
// first) is a blank frame, or when no non-blank frame follows it in the chunk; the first blank
// frame after a non-blank one with no non-blank after it in the chunk waits as `pending` and is
// kept (first) once a later chunk has a non-blank frame.

// Whether frame f [V] is a blank frame: its blank probability above th, or (weak) its argmax (first
// maximum) is the blank (asrdecode.ctc.collapse.blank_frames).
template <typename T>
inline bool is_blank_frame(const T* f, int64_t V, int64_t blank, bool weak, T th) {
  if (weak) {
    int64_t arg = 0;
    for (int64_t v = 1; v < V; ++v)
      if (f[v] > f[arg]) arg = v;
    return arg == blank;
  }
  return static_cast<T>(std::exp(f[blank])) > th;
}

template <typename T>
void ctc_collapse(const CollapseArgs& a) {
  const int64_t B = a.batch, Tn = a.frames, V = a.vocab, To = a.frames + 1;
  const T* x = static_cast<const T*>(a.x);
  T* pending = static_cast<T*>(a.pending);
  T* out_x = static_cast<T*>(a.out_x);
  const T th = static_cast<T>(a.threshold);
  std::vector<char> is_blank(static_cast<size_t>(Tn));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = a.lengths[b];
    const T* xb = x + b * Tn * V;
    int64_t last_nb = -1;
    for (int64_t t = 0; t < len; ++t) {
      const bool blank = is_blank_frame(xb + t * V, V, a.blank, a.weak != 0, th);
      is_blank[static_cast<size_t>(t)] = blank;
      if (!blank) last_nb = t;
    }
    const bool any_nb = last_nb >= 0;
    int64_t n = 0;
    int64_t* idx = a.out_index + b * To;
    T* ob = out_x + b * To * V;
    if (a.pending_valid[b] && any_nb) {  // the waiting frame is kept after all
      std::copy(pending + b * V, pending + (b + 1) * V, ob);
      idx[n++] = a.pending_index[b];
    }
    int64_t wait_t = -1;
    for (int64_t t = 0; t < len; ++t) {
      const bool blank = is_blank[static_cast<size_t>(t)];
      const bool prev = t == 0 ? a.prev_blank[b] != 0 : is_blank[static_cast<size_t>(t - 1)] != 0;
      const bool trailing = t > last_nb;
      if (!(blank && (prev || trailing))) {
        std::copy(xb + t * V, xb + (t + 1) * V, ob + n * V);
        idx[n++] = a.offsets[b] + t;
      }
      if (wait_t < 0 && blank && !prev && trailing) wait_t = t;
    }
    for (int64_t t = n; t < To; ++t) idx[t] = -1;
    a.out_len[b] = n;
    if (wait_t >= 0) {
      std::copy(xb + wait_t * V, xb + (wait_t + 1) * V, pending + b * V);
      a.pending_index[b] = a.offsets[b] + wait_t;
      a.pending_valid[b] = 1;
    } else if (any_nb) {
      a.pending_valid[b] = 0;
    }
    if (len > 0) a.prev_blank[b] = is_blank[static_cast<size_t>(len - 1)];
  }
}

// The n-best of a CTCBeamState (asrdecode.ctc.beam._finalize): per utterance, the `nbest` best
// valid slots by score = logaddexp(p_b, p_nb) + fscore [+ beta * length] [+ sum_i w_i * final_i],
// higher first (ties to the lower slot), with their token sequences and times from the tree.

template <typename T>
std::string ctc_finalize(const CtcFinalArgs& a) {
  const int64_t B = a.batch, K = a.beam, NM = a.num_models, n = std::min(a.nbest, a.beam);
  const T* p_b = static_cast<const T*>(a.p_b);
  const T* p_nb = static_cast<const T*>(a.p_nb);
  const T* fscore = static_cast<const T*>(a.fscore);
  const T* length = static_cast<const T*>(a.length);
  const T beta = static_cast<T>(a.beta);
  std::vector<T> score(static_cast<size_t>(K));
  std::vector<int64_t> order(static_cast<size_t>(K));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < K; ++k) {
      const int64_t at = b * K + k;
      T s = asrd::log_add_exp(p_b[at], p_nb[at]);
      const bool valid = s > asrd::neg_inf<T>();
      s = s + fscore[at];
      if (a.beta != 0.0) s = s + beta * length[at];
      if (a.with_final && NM) {
        T total = T(0);
        for (int64_t m = 0; m < NM; ++m) {
          const FusionDesc& d = a.models[m];
          T f;
          if (d.kind == 0) {
            const int64_t state = a.fstates[at * NM + m];
            if (state < 0 || state >= d.automaton.num_states)
              return "fusion model " + std::to_string(m) + " has state " + std::to_string(state) + " outside its automaton";
            f = static_cast<T>(d.automaton.final_weight[state]);
          } else if (d.kind == 2) {
            float fw;
            if (!asrd::word_lm_final(*d.word, a.fstates[at * NM + m], &fw))
              return "fusion model " + std::to_string(m) + " has state " + std::to_string(a.fstates[at * NM + m]) +
                     " outside its word LM";
            f = static_cast<T>(fw);
          } else {
            f = static_cast<const T*>(d.rows_scores)[at];
          }
          const T term = asrd::weigh(f, static_cast<T>(d.weight));
          total = m == 0 ? term : total + term;
        }
        s = s + total;
      }
      score[static_cast<size_t>(k)] = valid ? s : asrd::neg_inf<T>();
      order[static_cast<size_t>(k)] = k;
    }
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&score](int64_t x, int64_t y) {
      return score[x] > score[y] || (score[x] == score[y] && x < y);
    });
    for (int64_t j = 0; j < n; ++j) {
      const int64_t slot = order[static_cast<size_t>(j)];
      const T s = score[static_cast<size_t>(slot)];
      const int64_t o = b * n + j;
      a.out_score[o] = static_cast<double>(s);
      if (!(s > asrd::neg_inf<T>())) {
        a.out_len[o] = -1;
        continue;
      }
      const int64_t len = asrd::backtrack_one(a.tok, a.par, a.dat, a.steps, B, K, b, slot, a.out_tok + o * a.steps,
                                              a.out_dat + o * a.steps);
      if (len < 0) return "the backpointer tree holds a parent slot out of range";
      a.out_len[o] = len;
    }
  }
  return "";
}

// A whole decode in one call (asrdecode.ctc.beam_search with no state and final=True, every fusion
// model read natively): a fresh state, blank collapse done in the frame loop (the kept frames of
// Definition 3 are searched in place, no copy), the frames, then the n-best as ctc_finalize gives it.

template <typename T>
std::string ctc_decode(const CtcDecodeArgs& d) {
  const int64_t B = d.batch, K = d.beam, V = d.vocab, Tn = d.frames, NM = d.num_models;
  for (int64_t i = 0; i < NM; ++i)
    if (d.models[i].kind == 1) return "ctc_decode: fusion rows are not supported";
  const size_t BK = static_cast<size_t>(B * K);
  const T ninf = asrd::neg_inf<T>();
  std::vector<T> p_b(BK, ninf), p_nb(BK, ninf), fscore(BK, T(0)), length(BK, T(0)), peak(BK, ninf);
  std::vector<int64_t> last(BK, -1), hash(BK, -1), phash(BK, -2);
  std::vector<int64_t> fst(BK * static_cast<size_t>(NM));
  for (int64_t m = 0; m < NM; ++m)
    for (size_t q = 0; q < BK; ++q) fst[q * static_cast<size_t>(NM) + static_cast<size_t>(m)] = d.init_fstates[m][q];
  for (int64_t b = 0; b < B; ++b) {
    p_b[static_cast<size_t>(b * K)] = T(0);
    hash[static_cast<size_t>(b * K)] = 0;  // EMPTY_HASH
  }
  std::vector<int64_t> lens(d.lengths, d.lengths + B), src;
  if (d.collapse) {  // Definition 3 on the whole utterance: the first frame of each blank run is kept unless it
                     // starts the utterance or the trailing run
    src.assign(static_cast<size_t>(B * Tn), 0);
    const T th = static_cast<T>(d.collapse_threshold);
    std::vector<char> is_blank(static_cast<size_t>(Tn));
    for (int64_t b = 0; b < B; ++b) {
      const T* xb = static_cast<const T*>(d.x) + b * d.x_stride;
      int64_t last_nb = -1;
      for (int64_t t = 0; t < lens[b]; ++t) {
        is_blank[static_cast<size_t>(t)] = is_blank_frame(xb + t * V, V, d.blank, d.collapse == 2, th);
        if (!is_blank[static_cast<size_t>(t)]) last_nb = t;
      }
      int64_t n = 0;
      for (int64_t t = 0; t <= last_nb; ++t)
        if (!is_blank[static_cast<size_t>(t)] || (t > 0 && !is_blank[static_cast<size_t>(t - 1)])) src[b * Tn + n++] = t;
      lens[b] = n;
    }
  }
  std::vector<int64_t> tree(3 * static_cast<size_t>(Tn) * BK);
  int64_t* tok = tree.data();
  int64_t* par = tok + static_cast<size_t>(Tn) * BK;
  int64_t* dat = par + static_cast<size_t>(Tn) * BK;
  CtcBeamArgs a{B, K, V, Tn, d.x_stride, d.blank, d.is_double, d.num_tokens, d.merge_all, NM, 0, Tn, d.beta,
                d.threshold, d.x, lens.data(), p_b.data(), p_nb.data(), fscore.data(), length.data(), peak.data(),
                last.data(), hash.data(), phash.data(), fst.data(), tok, par, dat, nullptr, d.models};
  CtcBeam<T> search(a);
  search.set_frame_source(d.collapse ? src.data() : nullptr);
  std::string err = search.run();
  if (!err.empty()) return err;
  CtcFinalArgs f{B, K, d.is_double, NM, 1, d.nbest, Tn, d.beta, p_b.data(), p_nb.data(), fscore.data(),
                 length.data(), fst.data(), d.models, tok, par, dat, d.out_score, d.out_len, d.out_tok, d.out_dat};
  return ctc_finalize<T>(f);
}

extern "C" {

// A whole CTC prefix beam search (see CtcDecodeArgs). Returns 0, or 1 with a message in `err`
// (guard.h's codes for an exception).
int asrd_ctc_beam_decode(const CtcDecodeArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] { return args->is_double ? ctc_decode<double>(*args) : ctc_decode<float>(*args); },
                             err, err_len);
}

// Blank collapse of one chunk (see CollapseArgs); the state is updated in place. Returns 0, or
// guard.h's code for an exception.
int asrd_ctc_collapse(const CollapseArgs* args) {
  return asrd::guard_code<int>([&] {
    if (args->is_double) ctc_collapse<double>(*args); else ctc_collapse<float>(*args);
    return 0;
  });
}

// The n-best lists of a CTC beam state (see CtcFinalArgs). Returns 0, or 1 with a message in `err`.
int asrd_ctc_finalize(const CtcFinalArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] { return args->is_double ? ctc_finalize<double>(*args) : ctc_finalize<float>(*args); },
                             err, err_len);
}

// Version of the C ABI below (the Python side checks it).
int asrd_abi_version() noexcept { return 4; }

// Runs frames [t_begin, t_end) of the CTC prefix beam search in place on the state arrays.
// Returns 0, or 1 with a message in `err` (at most err_len bytes, NUL-terminated).
int asrd_ctc_beam_run(const CtcBeamArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] {
    if (args->is_double) {
      CtcBeam<double> s(*args);
      return s.run();
    }
    CtcBeam<float> s(*args);
    return s.run();
  }, err, err_len);
}

}  // extern "C"
