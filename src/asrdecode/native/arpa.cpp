// ARPA text reading on the native engine (asrdecode/lm/arpa.py, asrdecode/native/arpa.py): one pass
// over the bytes, fed in chunks (a plain file read in blocks, or gzip decompressed by Python in
// blocks), every n-gram written straight into the caller's arrays (word ids, log10 probability and
// backoff as float32, whether it has a backoff) together with its links into the n-gram trie (the
// file index of its context (k-1)-gram and of its longest proper suffix that is an n-gram; orders
// >= 3: a 2-gram's are its two words; int32 where the counts allow, else int64). Lines are not kept
// per n-gram: each order's runs of n-grams on consecutive lines are (asrd_arpa_lines), so that an
// error found later still names its line.
//
// It reads a strict subset of what the Python line reader accepts and gives exactly its values
// there: numbers are plain decimals ([+-]digits[.digits][e[+-]digits], parsed correctly rounded by
// std::from_chars, as Python's float(), then rounded to float32 as numpy's astype rounds); count
// lines are "ngram K=COUNT" with plain digits. A backoff that float32 cannot hold stops it too. Anything
// else (a malformed or unusual line, a duplicate, a word outside the 1-grams, a missing context,
// a line over the length limit) stops it with kArpaFallback and a message naming the line; the
// Python line reader then reads the file again and raises its named error (or accepts what only it
// accepts, e.g. "-inf" or "1_0"). UTF-8 of the words is checked by the caller (the vocabulary is
// handed over as one '\n'-separated blob).
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <system_error>
#include <vector>

#include "abi.h"
#include "guard.h"

namespace {

constexpr int kMore = 0, kNeedOutputs = 1, kDone = 2, kFallback = 3, kBadArgs = -1;
constexpr int64_t kMaxOrder = 32;
constexpr uint32_t kEmpty = 0xFFFFFFFFu;

inline bool is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

uint64_t hash_bytes(const uint8_t* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(n) * 0xC2B2AE3D27D4EB4Full);
  while (n >= 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    h = mix(h ^ x);
    p += 8;
    n -= 8;
  }
  uint64_t x = 0;
  std::memcpy(&x, p, n);
  return mix(h ^ x ^ 0x165667B19E3779F9ull);
}

// A plain decimal number (see the header); false for anything else (the Python reader judges it).
bool parse_number(const uint8_t* p, size_t n, double* out) {
  size_t i = 0;
  bool neg = false;
  if (i < n && (p[i] == '+' || p[i] == '-')) neg = p[i++] == '-';
  const size_t begin = i;
  size_t digits = 0;
  while (i < n && is_digit(p[i])) ++i, ++digits;
  if (i < n && p[i] == '.') {
    ++i;
    while (i < n && is_digit(p[i])) ++i, ++digits;
  }
  if (digits == 0) return false;
  if (i < n && (p[i] == 'e' || p[i] == 'E')) {
    ++i;
    if (i < n && (p[i] == '+' || p[i] == '-')) ++i;
    size_t e = 0;
    while (i < n && is_digit(p[i])) ++i, ++e;
    if (e == 0) return false;
  }
  if (i != n) return false;
  double v = 0.0;
  const char* first = reinterpret_cast<const char*>(p) + begin;
  const char* last = reinterpret_cast<const char*>(p) + n;
  const auto r = std::from_chars(first, last, v, std::chars_format::general);
  if (r.ec != std::errc() || r.ptr != last || !std::isfinite(v)) return false;
  *out = neg ? -v : v;
  return true;
}

// Plain digits (at most 18) -> value; false otherwise.
bool parse_count(const uint8_t* p, size_t n, int64_t* out) {
  if (n == 0 || n > 18) return false;
  int64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!is_digit(p[i])) return false;
    v = v * 10 + (p[i] - '0');
  }
  *out = v;
  return true;
}

struct Field {
  const uint8_t* p;
  size_t n;
};

// A slot of an n-gram table (4 bytes: the table is the reader's largest allocation) is one uint32:
// the n-gram's index in its order in the low `bits` bits (2^bits > the order's count, so a slot is
// never kEmpty, the free slot) and the low bits of its key's hash above them; the key itself (context
// index, last word) is read back from the output arrays when those check bits match.
struct NGramTable {
  std::vector<uint32_t> slots;
  uint32_t index_mask = 0;  // the low `bits` bits
  int bits = 0;

  void reset(int64_t count) {
    bits = 1;
    while (bits < 32 && (int64_t{1} << bits) <= count) ++bits;
    index_mask = bits == 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
    slots.assign(static_cast<size_t>(count + count / 2 + 16), kEmpty);  // load at most 2/3
  }
  uint32_t tag(uint64_t hash) const { return bits == 32 ? 0 : static_cast<uint32_t>(hash) << bits; }
};

// A slot of the vocabulary table: the word id (kEmpty: free) and the high bits of the word's hash.
struct WordSlot {
  uint32_t id;
  uint32_t check;
};

class Parser {
 public:
  explicit Parser(int64_t max_line) : max_line_(max_line) {}

  int feed(asrd::ArpaArgs* a, char* err, int64_t err_len) {
    err_ = err;
    err_len_ = err_len;
    a->consumed = 0;
    if (a->length < 0 || (a->length > 0 && !a->data)) return kBadArgs;
    if (waiting_ && !bind(a)) return kBadArgs;
    args_ = a;
    const uint8_t* const data = a->data;
    const uint8_t* p = data;
    const uint8_t* const end = data ? data + a->length : data;
    const bool final = a->final_chunk != 0;
    if (!pending_.empty()) {  // the line that began in the last chunk
      const uint8_t* nl = p == end ? nullptr : static_cast<const uint8_t*>(std::memchr(p, '\n', end - p));
      const size_t take = nl ? static_cast<size_t>(nl - p) : static_cast<size_t>(end - p);
      if (static_cast<int64_t>(pending_.size() + take) + (nl ? 1 : 0) > max_line_) return fail("line too long");
      pending_.append(reinterpret_cast<const char*>(p), take);
      if (!nl && !final) {
        a->consumed = a->length;
        return kMore;
      }
      p = nl ? nl + 1 : end;
      std::string line;
      line.swap(pending_);
      int r = on_line(reinterpret_cast<const uint8_t*>(line.data()), line.size());
      if (r == kMore) r = flush();  // the line is queued at most until here
      if (r != kMore) {
        a->consumed = p - data;
        return r;
      }
    }
    while (p < end) {
      const uint8_t* nl = static_cast<const uint8_t*>(std::memchr(p, '\n', end - p));
      if (!nl) {
        if (end - p > max_line_) return fail("line too long");
        if (!final) {
          pending_.assign(reinterpret_cast<const char*>(p), end - p);
          p = end;
          break;
        }
        const int r = on_line(p, end - p);
        p = end;
        if (r != kMore) {
          a->consumed = p - data;
          return r;
        }
        break;
      }
      if (nl - p + 1 > max_line_) return fail("line too long");
      const int r = on_line(p, nl - p);
      p = nl + 1;
      if (r != kMore) {
        a->consumed = p - data;
        return r;
      }
    }
    const int r = flush();  // the lines queued point into this chunk
    if (r != kMore) return r;
    a->consumed = a->length;
    if (!final) return kMore;
    if (phase_ != 3) return fail("the file ends before '\\end\\'");
    return kDone;
  }

  // The vocabulary: the 1-gram words joined by '\n' (bytes), copied when `cap` is enough; returns its size.
  int64_t vocab(uint8_t* out, int64_t cap) const {
    const int64_t n = arena_.empty() ? 0 : static_cast<int64_t>(arena_.size()) - 1;  // no trailing '\n'
    if (out && cap >= n && n > 0) std::memcpy(out, arena_.data(), n);
    return n;
  }

  // The runs of order k's n-grams on consecutive lines, as pairs (index of the run's first n-gram, its
  // line), copied into out when cap (int64 values) is enough; returns the number of values (-1: no
  // such order).
  int64_t lines(int64_t k, int64_t* out, int64_t cap) const {
    if (k < 1 || k >= static_cast<int64_t>(runs_.size())) return -1;
    const std::vector<int64_t>& r = runs_[k];
    const int64_t n = static_cast<int64_t>(r.size());
    if (out && cap >= n && n > 0) std::memcpy(out, r.data(), sizeof(int64_t) * n);
    return n;
  }

 private:
  int fail(const char* why) { return fail_at(lineno_, why); }

  int fail_at(int64_t line, const char* why) {
    queued_ = 0;
    const std::string msg = "line " + std::to_string(line) + ": " + why;
    asrd::copy_message(msg.c_str(), nullptr, err_, err_len_);
    return kFallback;
  }

  static Field strip(const uint8_t* p, size_t n) {
    while (n && is_ws(p[0])) ++p, --n;
    while (n && is_ws(p[n - 1])) --n;
    return {p, n};
  }

  static bool equals(Field f, const char* s) {
    const size_t n = std::strlen(s);
    return f.n == n && std::memcmp(f.p, s, n) == 0;
  }

  int on_line(const uint8_t* p, size_t n) {
    ++lineno_;
    switch (phase_) {
      case 0: return on_data_line(p, n);
      case 1: return on_header_line(p, n);
      case 2: return on_section_line(p, n);
      default: return kMore;  // after \end\: read on (limits and gzip checks), nothing else
    }
  }

  int on_data_line(const uint8_t* p, size_t n) {
    const Field s = strip(p, n);
    if (s.n == 0) return kMore;
    if (!equals(s, "\\data\\")) return fail("expected '\\data\\'");
    phase_ = 1;
    declared_.assign(1, -1);
    return kMore;
  }

  int on_header_line(const uint8_t* p, size_t n) {
    const Field s = strip(p, n);
    if (s.n == 0) return kMore;
    if (s.n >= 5 && std::memcmp(s.p, "ngram", 5) == 0) {
      const Field rest = strip(s.p + 5, s.n - 5);
      const uint8_t* eq = static_cast<const uint8_t*>(std::memchr(rest.p, '=', rest.n));
      if (!eq) return fail("malformed count line");
      const Field ks = strip(rest.p, eq - rest.p);
      const Field cs = strip(eq + 1, rest.p + rest.n - eq - 1);
      int64_t k = 0, c = 0;
      if (!parse_count(ks.p, ks.n, &k) || !parse_count(cs.p, cs.n, &c) || k < 1 || k > kMaxOrder) {
        return fail("malformed count line");
      }
      if (static_cast<int64_t>(declared_.size()) <= k) declared_.resize(k + 1, -1);
      if (declared_[k] >= 0) return fail("a count declared twice");
      declared_[k] = c;
      return kMore;
    }
    if (!equals(s, "\\1-grams:")) return fail("expected '\\1-grams:'");
    order_ = static_cast<int64_t>(declared_.size()) - 1;
    if (order_ < 1) return fail("no counts");
    for (int64_t k = 1; k <= order_; ++k) {
      if (declared_[k] < 0) return fail("the counts skip an order");
      if (declared_[k] >= static_cast<int64_t>(kEmpty)) return fail("too many n-grams for the native reader");
    }
    if (declared_[1] > 0x7FFFFFFF) return fail("too many words for int32 word ids");
    if (args_->counts == nullptr || args_->max_order < order_) return fail("too many orders for the counts buffer");
    for (int64_t k = 1; k <= order_; ++k) args_->counts[k - 1] = declared_[k];
    args_->order = order_;
    phase_ = 2;
    k_ = 1;
    filled_.assign(order_ + 1, 0);
    waiting_ = true;
    return kNeedOutputs;
  }

  // The output arrays (sized by the declared counts) and the hash tables.
  bool bind(const asrd::ArpaArgs* a) {
    if (a->order != order_ || !a->capacity || !a->words || !a->logprob || !a->backoff || !a->has_backoff ||
        !a->context || !a->suffix || (a->link_bytes != 4 && a->link_bytes != 8)) {
      return false;
    }
    wide_ = a->link_bytes == 8;
    for (int64_t k = 1; k <= order_; ++k) {
      const int64_t c = declared_[k];
      if (a->capacity[k - 1] != c) return false;
      if (!wide_ && k < order_ && c >= kNarrowLimit) return false;  // a link of int32 could not hold it
      if (c > 0 && (!a->words[k - 1] || !a->logprob[k - 1] || !a->backoff[k - 1] || !a->has_backoff[k - 1] ||
                    (k > 2 && (!a->context[k - 1] || !a->suffix[k - 1])))) {
        return false;
      }
    }
    words_.assign(a->words, a->words + order_);
    logprob_.assign(a->logprob, a->logprob + order_);
    backoff_.assign(a->backoff, a->backoff + order_);
    has_backoff_.assign(a->has_backoff, a->has_backoff + order_);
    context_.assign(a->context, a->context + order_);
    suffix_.assign(a->suffix, a->suffix + order_);
    runs_.assign(order_ + 1, {});
    last_line_.assign(order_ + 1, -1);
    vocab_slots_.assign(table_size(declared_[1]), WordSlot{kEmpty, 0});
    word_start_.reserve(declared_[1]);
    word_len_.reserve(declared_[1]);
    tables_.assign(order_ + 1, {});
    for (int64_t k = 2; k < order_; ++k) tables_[k].reset(declared_[k]);
    waiting_ = false;
    return true;
  }

  // Link i of order k (context or suffix array; int32 or int64 as bound).
  int64_t link(const std::vector<void*>& a, int64_t k, int64_t i) const {
    return wide_ ? static_cast<const int64_t*>(a[k - 1])[i] : static_cast<const int32_t*>(a[k - 1])[i];
  }

  void set_link(std::vector<void*>& a, int64_t k, int64_t i, int64_t v) {
    if (wide_) {
      static_cast<int64_t*>(a[k - 1])[i] = v;
    } else {
      static_cast<int32_t*>(a[k - 1])[i] = static_cast<int32_t>(v);
    }
  }

  // The key (context index << 32 | last word) of n-gram i of order k >= 2, from the output arrays.
  uint64_t key_of(int64_t k, int64_t i) const {
    const int32_t* w = words_[k - 1] + i * k;
    const int64_t ctx = k == 2 ? w[0] : link(context_, k, i);
    return key(ctx, w[k - 1]);
  }

  // Home slot of a hash in a table of `size` slots: the high bits of hash * size (any size).
  static size_t home(uint64_t hash, size_t size) {
    return static_cast<size_t>((static_cast<unsigned __int128>(hash) * size) >> 64);
  }

  // The vocabulary table's size: a power of two over n / 0.7 (linear probing stays short). The n-gram
  // tables (the large ones, NGramTable): any size, load at most 2/3 (home slots by home()).
  static size_t table_size(int64_t n) {
    size_t s = 16;
    while (s * 7 < static_cast<size_t>(n) * 10 + 10) s <<= 1;
    return s;
  }

  // Word id of a field, -1 when it is no 1-gram; `slot` and `check` get the probe's end (the free slot
  // on a miss) and the hash's high bits.
  int64_t find_word(const uint8_t* p, size_t n, size_t* slot, uint32_t* check) const {
    const size_t mask = vocab_slots_.size() - 1;
    const uint64_t hash = hash_bytes(p, n);
    *check = static_cast<uint32_t>(hash >> 32);
    size_t h = hash & mask;
    while (true) {
      const WordSlot& s = vocab_slots_[h];
      if (s.id == kEmpty) {
        *slot = h;
        return -1;
      }
      if (s.check == *check && word_len_[s.id] == n && std::memcmp(arena_.data() + word_start_[s.id], p, n) == 0) {
        return s.id;
      }
      h = (h + 1) & mask;
    }
  }

  // Word id of a field whose hash_bytes is `hash`, -1 when it is no 1-gram.
  int64_t find_word_hashed(const uint8_t* p, size_t n, uint64_t hash) const {
    const size_t mask = vocab_slots_.size() - 1;
    const uint32_t check = static_cast<uint32_t>(hash >> 32);
    for (size_t h = hash & mask;; h = (h + 1) & mask) {
      const WordSlot& s = vocab_slots_[h];
      if (s.id == kEmpty) return -1;
      if (s.check == check && word_len_[s.id] == n && std::memcmp(arena_.data() + word_start_[s.id], p, n) == 0) {
        return s.id;
      }
    }
  }

  // Index in order k (>= 2) of the n-gram (context index in order k - 1, last word), -1 when absent;
  // `slot` and `tag` get the probe's end (the free slot on a miss) and the slot's check bits.
  int64_t find_ngram(int64_t k, int64_t ctx, int64_t w, size_t* slot, uint32_t* tag) const {
    const NGramTable& t = tables_[k];
    const size_t size = t.slots.size();
    const uint64_t want = key(ctx, w);
    const uint64_t hash = mix(want);
    *tag = t.tag(hash);  // the low bits of the hash (home() uses the high ones)
    const uint32_t mask = t.index_mask;
    size_t h = home(hash, size);
    while (true) {
      const uint32_t s = t.slots[h];
      if (s == kEmpty) {
        *slot = h;
        return -1;
      }
      if ((s & ~mask) == *tag && key_of(k, s & mask) == want) return s & mask;
      h = h + 1 == size ? 0 : h + 1;
    }
  }

  // Index in order m of the word sequence w [m] (every prefix an n-gram), -1 when absent; m < order.
  int64_t find_sequence(const int32_t* w, int64_t m) const {
    int64_t idx = w[0];
    size_t slot;
    uint32_t tag;
    for (int64_t j = 2; j <= m && idx >= 0; ++j) idx = find_ngram(j, idx, w[j - 1], &slot, &tag);
    return idx;
  }

  int on_section_line(const uint8_t* p, size_t n) {
    size_t a = 0;
    while (a < n && is_ws(p[a])) ++a;
    if (a == n) return kMore;
    if (p[a] == '\\') {
      const int r = flush();
      return r != kMore ? r : on_control_line(strip(p, n));
    }
    if (k_ == 1) {  // the words themselves: one line at a time
      Field f[3];
      const int r = split(p, n, lineno_, f);
      return r != kMore ? r : ngram(f, nullptr, lineno_);
    }
    queue_[queued_++] = {p, n, lineno_};
    return queued_ == kBatch ? flush() : kMore;
  }

  // The fields of an n-gram line of the current order (k + 1 or k + 2 of them) into f.
  int split(const uint8_t* p, size_t n, int64_t line, Field* f) {
    const int64_t k = k_;
    int64_t nf = 0;
    const uint8_t* const e = p + n;
    for (const uint8_t* q = p; q < e;) {
      while (q < e && is_ws(*q)) ++q;
      if (q == e) break;
      const uint8_t* s = q;
      while (q < e && !is_ws(*q)) ++q;
      if (nf == k + 2) return fail_at(line, "too many fields");
      f[nf++] = {s, static_cast<size_t>(q - s)};
    }
    if (nf != k + 1 && nf != k + 2) return fail_at(line, "wrong number of fields");
    if (nf == k + 1) f[k + 1] = {nullptr, 0};
    return kMore;
  }

  // The queued lines of order k >= 2 in three passes, so that the hash tables' cache misses overlap:
  // fields and word hashes (the vocabulary slots prefetched), word ids (the first n-gram slots of the
  // context, the suffix and the insertion prefetched), then the rest of each line in file order.
  int flush() {
    const int64_t n = queued_;
    queued_ = 0;
    const int64_t k = k_;
    const size_t vmask = vocab_slots_.size() - 1;
    for (int64_t q = 0; q < n; ++q) {
      Field* f = &fields_[q * (kMaxOrder + 2)];
      const int r = split(queue_[q].p, queue_[q].n, queue_[q].line, f);
      if (r != kMore) return r;
      for (int64_t j = 0; j < k; ++j) {
        const uint64_t h = hash_bytes(f[j + 1].p, f[j + 1].n);
        hashes_[q * kMaxOrder + j] = h;
        __builtin_prefetch(&vocab_slots_[h & vmask]);
      }
    }
    const bool insert2 = k == 2 && order_ > 2;
    const size_t tsize = order_ > 2 ? tables_[2].slots.size() : 0;
    for (int64_t q = 0; q < n; ++q) {
      const Field* f = &fields_[q * (kMaxOrder + 2)];
      int32_t* w = &ids_[q * kMaxOrder];
      for (int64_t j = 0; j < k; ++j) {
        const int64_t id = find_word_hashed(f[j + 1].p, f[j + 1].n, hashes_[q * kMaxOrder + j]);
        if (id < 0) return fail_at(queue_[q].line, "a word outside the 1-grams");
        w[j] = static_cast<int32_t>(id);
      }
      if (k >= 3) {
        __builtin_prefetch(&tables_[2].slots[home(mix(key(w[0], w[1])), tsize)]);
        __builtin_prefetch(&tables_[2].slots[home(mix(key(w[1], w[2])), tsize)]);
      } else if (insert2) {
        __builtin_prefetch(&tables_[2].slots[home(mix(key(w[0], w[1])), tsize)]);
      }
    }
    for (int64_t q = 0; q < n; ++q) {
      const int r = ngram(&fields_[q * (kMaxOrder + 2)], &ids_[q * kMaxOrder], queue_[q].line);
      if (r != kMore) return r;
    }
    return kMore;
  }

  static uint64_t key(int64_t ctx, int64_t w) { return (static_cast<uint64_t>(ctx) << 32) | static_cast<uint32_t>(w); }

  // One n-gram of the current order: fields f (f[k + 1].p null: no backoff), word ids (null: 1-grams).
  int ngram(const Field* f, const int32_t* ids, int64_t line) {
    const int64_t k = k_;
    const int64_t i = filled_[k];
    if (i >= declared_[k]) return fail_at(line, "more n-grams than the header declares");
    double lp = 0.0, bo = 0.0;
    if (!parse_number(f[0].p, f[0].n, &lp) || lp > 0) return fail_at(line, "log probability");
    const bool has_bo = f[k + 1].p != nullptr;
    if (has_bo && (k == order_ || !parse_number(f[k + 1].p, f[k + 1].n, &bo))) return fail_at(line, "backoff weight");
    const float lp32 = static_cast<float>(lp), bo32 = static_cast<float>(bo);
    if (bo32 == std::numeric_limits<float>::infinity()) return fail_at(line, "backoff weight over float32's range");
    int32_t* w = words_[k - 1] + i * k;
    size_t slot = 0;
    if (k == 1) {
      uint32_t check = 0;
      if (find_word(f[1].p, f[1].n, &slot, &check) >= 0) return fail_at(line, "duplicate 1-gram");
      vocab_slots_[slot] = WordSlot{static_cast<uint32_t>(i), check};
      word_start_.push_back(static_cast<int64_t>(arena_.size()));
      word_len_.push_back(f[1].n);
      arena_.insert(arena_.end(), f[1].p, f[1].p + f[1].n);
      arena_.push_back('\n');
      w[0] = static_cast<int32_t>(i);
    } else {
      std::memcpy(w, ids, sizeof(int32_t) * k);
      const int64_t ctx = find_sequence(w, k - 1);
      if (ctx < 0) return fail_at(line, "an n-gram without its context");
      if (k > 2) set_link(context_, k, i, ctx);  // before the insertion: the table reads the key back
      if (k < order_) {  // a state of the trie: insert it (a duplicate is the line reader's error)
        uint32_t tag = 0;
        if (find_ngram(k, ctx, w[k - 1], &slot, &tag) >= 0) return fail_at(line, "duplicate n-gram");
        tables_[k].slots[slot] = tag | static_cast<uint32_t>(i);
      }
      if (k > 2) {  // a 2-gram's links are its words: its context is w[0], its longest suffix w[1]
        int64_t m = k - 1, at = -1;  // the longest proper suffix w[k-m..k-1] that is an n-gram
        for (; m >= 1; --m) {
          at = find_sequence(w + (k - m), m);
          if (at >= 0) break;
        }
        set_link(suffix_, k, i, (at << 6) | m);  // m >= 1: the last word is a 1-gram
      }
    }
    logprob_[k - 1][i] = lp32;
    if (has_bo) {  // the caller zero-filled both (a top order's pages are never touched)
      backoff_[k - 1][i] = bo32;
      has_backoff_[k - 1][i] = 1;
    }
    if (line != last_line_[k] + 1) {  // a new run of consecutive lines
      runs_[k].push_back(i);
      runs_[k].push_back(line);
    }
    last_line_[k] = line;
    filled_[k] = i + 1;
    return kMore;
  }

  int on_control_line(Field s) {
    if (filled_[k_] != declared_[k_]) return fail("the section's count differs from the header's");
    if (k_ == order_) {
      if (!equals(s, "\\end\\")) return fail("expected '\\end\\'");
      phase_ = 3;
      return kMore;
    }
    const std::string next = "\\" + std::to_string(k_ + 1) + "-grams:";
    if (!equals(s, next.c_str())) return fail("expected the next section");
    ++k_;
    return kMore;
  }

  // Link arrays of int32 hold indices below this (a suffix link is (index << 6) | order).
  static constexpr int64_t kNarrowLimit = int64_t{1} << 25;

  int64_t max_line_;
  int phase_ = 0;  // 0: before \data\, 1: the counts, 2: the sections, 3: after \end\ .
  int64_t lineno_ = 0;
  int64_t order_ = 0;
  int64_t k_ = 0;
  bool waiting_ = false;  // the counts are out, the outputs not bound yet
  bool wide_ = false;     // int64 links (else int32)
  std::vector<int64_t> declared_, filled_;
  std::string pending_;
  asrd::ArpaArgs* args_ = nullptr;
  char* err_ = nullptr;
  int64_t err_len_ = 0;
  std::vector<char> arena_;
  std::vector<int64_t> word_start_;
  std::vector<size_t> word_len_;
  std::vector<WordSlot> vocab_slots_;
  std::vector<NGramTable> tables_;
  static constexpr int64_t kBatch = 32;
  struct Queued {
    const uint8_t* p;
    size_t n;
    int64_t line;
  };
  Queued queue_[kBatch];
  int64_t queued_ = 0;
  Field fields_[kBatch * (kMaxOrder + 2)];
  uint64_t hashes_[kBatch * kMaxOrder];
  int32_t ids_[kBatch * kMaxOrder];
  std::vector<int32_t*> words_;
  std::vector<float*> logprob_, backoff_;
  std::vector<uint8_t*> has_backoff_;
  std::vector<void*> context_, suffix_;
  std::vector<std::vector<int64_t>> runs_;  // per order: (first index, line) of each run of lines
  std::vector<int64_t> last_line_;          // per order: the line of its last n-gram
};

}  // namespace

extern "C" {

// A reader for one file (nullptr: out of memory); lines longer than max_line bytes (newline
// included) stop it. Free it with asrd_arpa_close.
void* asrd_arpa_open(int64_t max_line) noexcept {
  if (max_line < 1) return nullptr;
  try {
    return new Parser(max_line);
  } catch (...) {
    return nullptr;
  }
}

void asrd_arpa_close(void* reader) noexcept { delete static_cast<Parser*>(reader); }

// Parse a->data [a->length] (a->final_chunk: the last bytes of the file). Returns 0: read, more to
// come; 1: the header is read (a->order, a->counts): bind the outputs (sized by the counts, capacity
// = counts) and feed the rest of the chunk (from a->consumed); 2: the file is read; 3: not read here
// (err says which line and why: the caller reads the file with the line reader); -1: bad arguments;
// guard.h's codes for an exception.
int asrd_arpa_feed(void* reader, asrd::ArpaArgs* a, char* err, int64_t err_len) noexcept {
  if (!reader || !a) return kBadArgs;
  return asrd::guard_code<int>([&] { return static_cast<Parser*>(reader)->feed(a, err, err_len); });
}

// Order k's runs of n-grams on consecutive lines: pairs (index of the run's first n-gram, its line),
// copied into out when cap (int64 values) is enough; returns the number of values (-1: no order k).
int64_t asrd_arpa_lines(void* reader, int64_t k, int64_t* out, int64_t cap) noexcept {
  if (!reader) return -1;
  return static_cast<Parser*>(reader)->lines(k, out, cap);
}

// The 1-gram words joined by '\n'; copies them into out when cap is enough; returns their size.
int64_t asrd_arpa_vocab(void* reader, uint8_t* out, int64_t cap) noexcept {
  if (!reader) return -1;
  return static_cast<Parser*>(reader)->vocab(out, cap);
}

}  // extern "C"
