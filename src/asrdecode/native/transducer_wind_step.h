// One WIND beam search step of asrdecode.transducer.beam (method="wind") on the native engine: the
// bookkeeping of one step (BeamLoop._wind_step) for every utterance, in place on the [B, S] state arrays
// of a WindArgs (S = (window + 1) * beam: a ring of per-frame lists of `beam` slots). Shared by the
// per-step entry points (transducer_wind.cpp: the networks run in torch between the calls) and the whole
// search with the networks in C++ (transducer_beam_net.cpp).
//
// wind_pop picks each stepping utterance's earliest frame list and says which (hypothesis, window frame)
// pairs the joint may score (a popped live hypothesis on every window frame inside the utterance); the
// per-step caller runs the joint on all of those rows, the one-call search (transducer_beam_net.cpp) hands
// WindStep a WindJoint that computes the rows it asks for. WindStep then does the rest: log-softmax,
// Equation 1 over the window, the prefix search, each expanding hypothesis's `beam` best (label, frame) or
// whole-window-blank continuations, and every frame list merged with its arrivals (equal transcripts by
// log-sum-exp) and pruned to `beam`; it writes the tree records, the parents (whose prediction-network
// states the caller moves) and the emitting rows (where it runs the network). Same rules and arithmetic
// order as the tensor step; ties go to the lower candidate / pool index. The window is read frame by
// frame (read_windows): a hypothesis stops reading once no later frame can place a candidate among its
// `beam` best, which keeps exactly the candidates of the whole window.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "transducer_common.h"

namespace asrd {
namespace twind {

using asrd::WindArgs;


constexpr int64_t kBig = std::numeric_limits<int64_t>::max();

// Per utterance: whether it steps (its earliest pending frame's window is received, or the chunk is its last).
inline void update_active(const WindArgs& a, int64_t b) {
  const bool is_double = a.is_double != 0;
  const int64_t S = (a.window + 1) * a.beam;
  int64_t tmin = kBig;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t r = b * S + s;
    const bool valid = is_double ? static_cast<const double*>(a.score)[r] > -INFINITY
                                 : static_cast<const float*>(a.score)[r] > -INFINITY;
    if (valid && a.time[r] < a.lengths[b]) tmin = std::min(tmin, a.time[r]);
  }
  a.active[b] = tmin != kBig && (a.final_chunk[b] || tmin + a.window <= a.lengths[b]);
}

// Pick each stepping utterance's popped list and list the joint rows (see WindArgs); returns their number.
template <typename T>
int64_t wind_pop(const WindArgs& a) {
  const int64_t K = a.beam, W = a.window, R = W + 1, S = R * K;
  const T* score = static_cast<const T*>(a.score);
  const int64_t last_frame = std::max<int64_t>(a.frames - 1, 0);
  int64_t m = 0;
  for (int64_t b = 0; b < a.batch; ++b) {
    int64_t* row_of = a.row_of + b * K * W;
    std::fill(row_of, row_of + K * W, int64_t(-1));
    if (!a.active[b]) continue;
    int64_t tmin = kBig;
    for (int64_t s = 0; s < S; ++s)
      if (score[b * S + s] > asrd::neg_inf<T>() && a.time[b * S + s] < a.lengths[b]) tmin = std::min(tmin, a.time[b * S + s]);
    a.tmin[b] = tmin;
    const int64_t r0 = (a.offset[b] + tmin) % R;
    const int64_t n = std::min(W, a.lengths[b] - tmin);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t slot = b * S + r0 * K + k;
      if (!(score[slot] > asrd::neg_inf<T>())) continue;
      for (int64_t j = 0; j < n; ++j) {
        row_of[k * W + j] = m;
        a.enc_rows[m] = b * a.frames + std::min(tmin + j, last_frame);
        a.dec_rows[m] = slot;
        ++m;
      }
    }
  }
  return m;
}

// One arrival or kept hypothesis in the merge pool of an utterance.
struct Entry {
  int64_t time, sym, hash, nl, last;
  int64_t src;    // parent slot
  int64_t tok;    // label or -1
  int64_t frame;  // tree data (the label's frame)
  int64_t lm;     // offset of its fusion states in the pool's state store
};

// The joint on request (a lazy window): the logits [m, V] of m (encoder buffer row, hypothesis row) pairs,
// valid until the next request.
template <typename T>
using WindJoint = std::function<const T*(int64_t m, const int64_t* enc_rows, const int64_t* dec_rows)>;

// The rows worth one matrix product (dense.cpp's row chunk: the cost per row stops falling there); the
// one-call search computes the waiting prediction-network steps in batches of at least this many (reading
// the window in blocks of frames to reach it was measured no faster: the unused rows cost the gain).
constexpr int64_t kRoundRows = 12;

// The lazy window's bound is exact up to the float rounding of the terms it bounds (a few operations on
// values of the bound's magnitude): a later frame is skipped only when the kept beam-th best candidate
// is above the bound by this relative margin (plus a small absolute one per window frame).
constexpr double kBoundSlack = 1e-5;

template <typename T>
class WindStep {
 public:
  // joint empty: a_.logits holds the rows wind_pop listed (every window frame inside the utterance); else
  // the step asks `joint` for the window frames it reads, one round (window frame) at a time for the whole
  // batch, and stops reading a hypothesis's window once no later frame can place a candidate among its
  // `beam` best (see read_windows). full_window: read every window frame (the check of the lazy window).
  explicit WindStep(const WindArgs& a, WindJoint<T> joint = {}, bool full_window = false)
      : a_(a), K_(a.beam), V_(a.vocab), W_(a.window), R_(a.window + 1), S_((a.window + 1) * a.beam),
        NM_(a.num_models), BK_(a.batch * a.beam), fusion_(a.models, a.num_models, a.vocab),
        joint_(std::move(joint)), full_window_(full_window) {
    const size_t BK = static_cast<size_t>(BK_), KV = static_cast<size_t>(K_ * V_);
    lp0_.resize(KV);
    row0_.resize(KV);
    lp_.resize(static_cast<size_t>(V_));
    row_.resize(static_cast<size_t>(V_));
    sel_.resize(static_cast<size_t>(V_));
    lm_full_.resize(BK * static_cast<size_t>(V_));
    lm_done_.assign(BK * static_cast<size_t>(V_), 0);
    for (auto* v : {&p_score_, &new_score_, &cum_, &cum_ac_, &whole_ac_, &lm_max_}) v->resize(BK);
    for (auto* v : {&live_, &removed_, &open_, &lm_max_done_}) v->resize(BK);
    ctx_.resize(static_cast<size_t>(a.batch));
    tops_.resize(BK);
    lam_ = static_cast<T>(a.lam);
    beta_ = static_cast<T>(a.beta);
    // a later frame's terms are <= 0 (blank (1 + lam) lp[blank], label lp[v] + lam log(1 - p[blank]))
    can_stop_ = !full_window_ && (!a.lm_weighted || a.lam >= 0.0);
  }

  std::string run() {
    if (a_.logit_cols != V_)
      return "joint output has " + std::to_string(a_.logit_cols) + " columns, expected vocab_size " + std::to_string(V_);
    ++stamp_;
    for (int64_t b = 0; b < a_.batch; ++b)
      if (a_.active[b]) open(b);
    std::string err = read_windows();
    if (!err.empty()) return err;
    int64_t n_emit = 0, stepping = 0;
    for (int64_t b = 0; b < a_.batch; ++b) {
      const int64_t base = b * S_;
      if (a_.active[b]) {
        const Ctx& c = ctx_[static_cast<size_t>(b)];
        seed_pool(c);
        for (int64_t k = 0; k < K_; ++k) {
          err = expand(c, k);
          if (!err.empty()) return err;
        }
        err = merge(b);
        if (!err.empty()) return err;
      } else {  // waits: every slot kept in place
        for (int64_t s = 0; s < S_; ++s) {
          a_.tok_out[base + s] = -1;
          a_.par_out[base + s] = s;
          a_.dat_out[base + s] = 0;
          a_.parent_flat[base + s] = base + s;
          a_.emitted[base + s] = 0;
          a_.labels[base + s] = a_.blank;
        }
      }
      update_active(a_, b);
      stepping += a_.active[b];
    }
    for (int64_t r = 0; r < a_.batch * S_; ++r)
      if (a_.emitted[r]) a_.emit_rows[n_emit++] = r;
    a_.counts[0] = stepping;
    a_.counts[1] = n_emit;
    return "";
  }

 private:
  // Where one step of utterance b works: its popped frame and list, its [S] state rows.
  struct Ctx {
    int64_t b, base, tmin, r0, n;  // n: window frames inside the utterance
    T* score;
    int64_t *time, *sym, *hsh, *nl, *last, *fst;
    const int64_t* row_of;
  };

  // Step 1 done by wind_pop: utterance b's context and its popped live hypotheses (h = b * K + k).
  void open(int64_t b) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t base = b * S_, tmin = a_.tmin[b];
    Ctx& c = ctx_[static_cast<size_t>(b)];
    c = Ctx{b, base, tmin, (a_.offset[b] + tmin) % R_, std::min(W_, a_.lengths[b] - tmin),
            static_cast<T*>(a_.score) + base, a_.time + base, a_.symbols + base, a_.hash + base,
            a_.nlabels + base, a_.last + base, a_.lm_states + base * NM_, a_.row_of + b * K_ * W_};
    for (int64_t k = 0; k < K_; ++k) {
      const size_t h = static_cast<size_t>(b * K_ + k);
      const int64_t slot = c.r0 * K_ + k;
      const bool live = c.score[slot] > ninf && c.row_of[k * W_] >= 0;
      live_[h] = live;
      open_[h] = live;
      removed_[h] = 0;
      lm_max_done_[h] = 0;
      p_score_[h] = live ? c.score[slot] : ninf;
      cum_[h] = cum_ac_[h] = whole_ac_[h] = T(0);
      tops_[h].reset(K_);
    }
  }

  // Steps 2-4 on the window frames, a round per frame j for the whole batch: the joint of every open
  // hypothesis's frame j (its popped live hypotheses on frame 0), then Equation 1's terms of that frame
  // and its candidates into the hypothesis's `beam` best (after frame 0: the prefix search first). A
  // hypothesis's window closes after its last frame, when the prefix search removed it, or when its
  // beam-th best candidate so far is strictly above every later candidate's bound (stop_reading): the
  // kept candidates are then those of the full window (ties cannot reach a closed window's frames).
  std::string read_windows() {
    for (int64_t j = 0; j < W_; ++j) {
      req_.clear();
      for (int64_t b = 0; b < a_.batch; ++b) {
        if (!a_.active[b] || j >= ctx_[static_cast<size_t>(b)].n) continue;
        for (int64_t k = 0; k < K_; ++k)
          if (open_[static_cast<size_t>(b * K_ + k)]) req_.push_back(b * K_ + k);
      }
      if (req_.empty()) break;
      std::string err = fetch_rows(j);
      if (!err.empty()) return err;
      if (j == 0) {
        size_t i = 0;
        for (int64_t b = 0; b < a_.batch; ++b) {
          if (!a_.active[b]) continue;
          const size_t i0 = i;
          while (i < req_.size() && req_[i] / K_ == b) ++i;
          err = first_frame(ctx_[static_cast<size_t>(b)], i0, i);
          if (!err.empty()) return err;
        }
        continue;
      }
      for (size_t i = 0; i < req_.size(); ++i) {
        const int64_t h = req_[i];
        const Ctx& c = ctx_[static_cast<size_t>(h / K_)];
        const T bac = frame_terms(h, j, c.n, rows_[i], lp_.data(), row_.data());
        err = candidates(c, h % K_, j, lp_.data(), row_.data(), bac);
        if (!err.empty()) return err;
      }
    }
    return "";
  }

  // rows_[i]: the logits [V] of (hypothesis req_[i], window frame j): asked of the joint, or read from
  // wind_pop's rows.
  std::string fetch_rows(int64_t j) {
    const size_t m = req_.size();
    rows_.resize(m);
    if (joint_) {
      enc_rows_.resize(m);
      dec_rows_.resize(m);
      const int64_t last_frame = std::max<int64_t>(a_.frames - 1, 0);
      for (size_t i = 0; i < m; ++i) {
        const int64_t b = req_[i] / K_, k = req_[i] % K_;
        const Ctx& c = ctx_[static_cast<size_t>(b)];
        enc_rows_[i] = b * a_.frames + std::min(c.tmin + j, last_frame);
        dec_rows_[i] = c.base + c.r0 * K_ + k;
      }
      const T* logits = joint_(static_cast<int64_t>(m), enc_rows_.data(), dec_rows_.data());
      for (size_t i = 0; i < m; ++i) rows_[i] = logits + static_cast<int64_t>(i) * V_;
      return "";
    }
    const T* logits = static_cast<const T*>(a_.logits);
    for (size_t i = 0; i < m; ++i) {
      const int64_t b = req_[i] / K_, k = req_[i] % K_;
      const int64_t at = ctx_[static_cast<size_t>(b)].row_of[k * W_ + j];
      if (at < 0 || at >= a_.logit_rows)
        return "joint output has " + std::to_string(a_.logit_rows) + " rows, the step reads row " + std::to_string(at);
      rows_[i] = logits + at * V_;
    }
    return "";
  }

  // Equation 1's terms of window frame j (of n) for hypothesis h from its logits: the log-softmax into
  // lp [V], the label terms without fusion into row [V] (blank: -inf, on the last frame the blank over the
  // whole window); the running blank sums cum_ / cum_ac_ advance. Returns the acoustic blank sum before j.
  T frame_terms(int64_t h, int64_t j, int64_t n, const T* logits, T* lp, T* row) {
    const size_t hh = static_cast<size_t>(h);
    asrd::check_joint_row(logits, V_);
    asrd::log_softmax(logits, V_, lp);
    const T lpb = lp[a_.blank];
    // (weigh: a masked class's -inf stays -inf at any lam, never NaN or +inf)
    const T blank_fr = a_.lm_weighted ? asrd::weigh(lpb, T(1) + lam_) : lpb;
    const T nonblank = a_.lm_weighted ? asrd::weigh(asrd::log_nonblank_mass(lp, V_, a_.blank), lam_) : T(0);
    // the tensor step: the running blank sum before frame j + nonblank + beta
    const T next_cum = cum_[hh] + blank_fr;
    const T label_base = (cum_[hh] + nonblank) + beta_;
    for (int64_t v = 0; v < V_; ++v) row[v] = label_base + lp[v];
    row[a_.blank] = asrd::neg_inf<T>();
    const T bac = cum_ac_[hh];
    cum_[hh] = next_cum;
    cum_ac_[hh] = cum_ac_[hh] + lpb;
    if (j == n - 1) {
      whole_ac_[hh] = cum_ac_[hh];
      row[a_.blank] = cum_[hh];  // blank on the whole window
    }
    return bac;
  }

  // Round 0 of utterance c.b (its rows rows_[i0:i1]): frame 0's terms of every popped live hypothesis, the
  // prefix search, then the expanding hypotheses' frame-0 candidates.
  std::string first_frame(const Ctx& c, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const int64_t k = req_[i] % K_;
      frame_terms(req_[i], 0, c.n, rows_[i], lp0_.data() + k * V_, row0_.data() + k * V_);
    }
    std::string err = prefix_search(c);
    if (!err.empty()) return err;
    for (int64_t k = 0; k < K_; ++k) {
      const size_t h = static_cast<size_t>(c.b * K_ + k);
      if (removed_[h]) open_[h] = 0;
      if (!open_[h]) continue;
      err = candidates(c, k, 0, lp0_.data() + k * V_, row0_.data() + k * V_, T(0) /* (0 + lp) - lp */);
      if (!err.empty()) return err;
    }
    return "";
  }

  // Step 3: prefix search. B = A + (v,) on this frame gets A's paths "then v here"; A is removed.
  std::string prefix_search(const Ctx& c) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, V = V_, NM = NM_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    const bool fused = NM > 0;
    const T* p_score = p_score_.data() + b * K;
    T* new_score = new_score_.data() + b * K;
    std::copy(p_score, p_score + K, new_score);
    for (int64_t bi = 0; bi < K; ++bi) {
      if (!live_[static_cast<size_t>(b * K + bi)]) continue;
      const int64_t sb = r0 * K + bi;
      terms_.clear();
      terms_.push_back(p_score[bi]);
      for (int64_t ai = 0; ai < K; ++ai) {
        const int64_t sa = r0 * K + ai;
        T complete = ninf;
        const bool pair = live_[static_cast<size_t>(b * K + ai)] && nl[sb] == nl[sa] + 1 &&
                          hsh[sb] == asrd::extend_hash(hsh[sa], last[sb]) &&
                          (a_.max_symbols < 0 || sym[sa] + 1 < a_.max_symbols);
        if (pair) {
          T lm_v = T(0);
          if (fused && !lm_of(b * K + ai, base + sa, fst + sa * NM, last[sb], &lm_v))
            return asrd::invalid_fusion_state(b, sa);
          complete = (p_score[ai] + row0_[static_cast<size_t>(ai * V + last[sb])]) + lm_v;
          removed_[static_cast<size_t>(b * K + ai)] = 1;
        }
        terms_.push_back(complete);
      }
      T mx = ninf;
      for (const T t : terms_) mx = std::max(mx, t);
      if (mx > ninf) {
        T sum = T(0);
        for (const T t : terms_) sum += std::exp(t - mx);
        new_score[bi] = mx + std::log(sum);
      }
    }
    return "";
  }

  // Step 4 on window frame j of expanding hypothesis k: its candidates (labels, on the last frame the
  // whole-window blank; lp / row / bac as frame_terms gave them) into its `beam` best, ranked by the fused
  // score or, with early pruning, the acoustic one (the payload: the score without fusion); then whether
  // its window stays open.
  std::string candidates(const Ctx& c, int64_t k, int64_t j, const T* lp, const T* row, T bac) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t V = V_, h = c.b * K_ + k;
    const size_t hh = static_cast<size_t>(h);
    const bool fused = NM_ > 0;
    const int64_t src = c.r0 * K_ + k;
    const int64_t* st = c.fst + src * NM_;
    auto& top = tops_[hh];
    // With a full best list only a candidate above its worst value can enter (candidates come in column
    // order, so a tie never does); the rank of a candidate is at most its row value (fusion scores <= 0)
    // unless the fusion is unbounded: the columns worth a look are picked by one plain pass first.
    const T floor = top.full() ? top.worst_value() : ninf;
    if (!a_.early) {
      const bool bounded = !fused || fusion_.bounded();
      int64_t* sel = sel_.data();  // [V]
      int64_t picked = 0;
      for (int64_t v = 0; v < V; ++v) {  // branch-free: the picked columns first, in order
        sel[picked] = v;
        picked += !bounded || row[v] > floor;
      }
      for (int64_t i = 0; i < picked; ++i) {
        const int64_t v = sel[i];
        const int64_t col = j * V + v;
        T val = row[v];
        if (!(val > ninf)) continue;
        if (v != a_.blank && fused) {
          if (bounded && !top.admits(val, col)) continue;  // fusion only lowers it
          T lm;
          if (!lm_of(h, c.base + src, st, v, &lm)) return asrd::invalid_fusion_state(c.b, src);
          val = val + lm;
        }
        top.push(val, col, row[v]);
      }
    } else {
      for (int64_t v = 0; v < V; ++v) {
        const T ac = v == a_.blank ? (j == c.n - 1 ? whole_ac_[hh] : ninf) : bac + lp[v];
        if (ac > ninf && ac > floor) top.push(ac, j * V + v, row[v]);
      }
    }
    if (j == c.n - 1) {
      open_[hh] = 0;
      return "";
    }
    bool stop = false;
    std::string err = stop_reading(c, k, &stop);
    if (stop) open_[hh] = 0;
    return err;
  }

  // Whether no candidate on a later window frame of hypothesis k can enter its `beam` best: each is at most
  // the blank sum so far (cum: fused, cum_ac: acoustic) plus, when ranked by the fused score, the bonus
  // beta and the largest weighted fusion score of a label from its states (0 when every score is <= 0).
  std::string stop_reading(const Ctx& c, int64_t k, bool* stop) {
    const size_t h = static_cast<size_t>(c.b * K_ + k);
    auto& top = tops_[h];
    if (!can_stop_ || !top.full()) return "";
    double bound = a_.early ? static_cast<double>(cum_ac_[h]) : static_cast<double>(cum_[h]);
    double mag = std::abs(bound);
    if (!a_.early) {
      T lm_max = T(0);
      if (NM_ > 0 && !fusion_.bounded()) {
        std::string err = label_lm_max(c, k, &lm_max);
        if (!err.empty()) return err;
      }
      const double bonus = static_cast<double>(beta_) + static_cast<double>(lm_max);
      bound += std::max(0.0, bonus);
      mag += std::abs(static_cast<double>(beta_)) + std::abs(static_cast<double>(lm_max));
    }
    bound += kBoundSlack * (1.0 + mag) + 1e-6 * static_cast<double>(c.n);
    *stop = static_cast<double>(top.worst_value()) > bound;
    return "";
  }

  // The largest weighted fusion score of a label for popped hypothesis k (memoised per step).
  std::string label_lm_max(const Ctx& c, int64_t k, T* out) {
    const size_t h = static_cast<size_t>(c.b * K_ + k);
    if (!lm_max_done_[h]) {
      const int64_t src = c.r0 * K_ + k;
      T mx = asrd::neg_inf<T>();
      for (int64_t v = 0; v < V_; ++v) {
        if (v == a_.blank) continue;
        T lm;
        if (!lm_of(c.b * K_ + k, c.base + src, c.fst + src * NM_, v, &lm)) return asrd::invalid_fusion_state(c.b, src);
        mx = std::max(mx, lm);
      }
      lm_max_[h] = mx;
      lm_max_done_[h] = 1;
    }
    *out = lm_max_[h];
    return "";
  }

  // Step 4 begins: the pool holds the lists as they are (the popped list is consumed).
  void seed_pool(const Ctx& c) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, S = S_, NM = NM_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    pool_.clear();
    pool_score_.clear();
    pool_lm_.clear();
    for (int64_t s = 0; s < S; ++s) {  // the lists as they are; the popped list is consumed
      const bool popped = s / K == r0;
      pool_score_.push_back(popped ? ninf : score[s]);
      pool_.push_back(Entry{time[s], sym[s], hsh[s], nl[s], last[s], s, -1, time[s],
                            static_cast<int64_t>(pool_lm_.size())});
      pool_lm_.insert(pool_lm_.end(), fst + s * NM, fst + (s + 1) * NM);
    }
  }

  // Step 4 ends: popped hypothesis k's K best continuations (its candidates' `beam` best, within gamma of
  // the best where set) into the pool.
  std::string expand(const Ctx& c, int64_t k) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, NM = NM_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    const bool fused = NM > 0;
    const int64_t src = r0 * K + k;
    const size_t h = static_cast<size_t>(b * K + k);
    const bool expand = live_[h] && !removed_[h];
    if (!expand) tops_[h].reset(K);
    auto& best = tops_[h].sorted();
    for (int64_t q = 0; q < K; ++q) {
      if (!expand || q >= static_cast<int64_t>(best.size()) ||
          (a_.has_gamma && best[q].value < best[0].value - static_cast<T>(a_.gamma))) {
        pool_score_.push_back(ninf);
        pool_.push_back(Entry{0, 0, 0, 0, a_.blank, src, -1, 0, 0});
        continue;
      }
      const int64_t col = best[q].index;
      const int64_t tok = col % V_, j = col / V_;
      const bool lab = tok != a_.blank;
      T val = best[q].payload;  // early pruning: the score without fusion
      if (a_.early && lab && fused) {
        T lm;
        if (!lm_of(b * K + k, base + src, fst + src * NM, tok, &lm)) return asrd::invalid_fusion_state(b, src);
        val = val + lm;
      } else if (!a_.early) {
        val = best[q].value;
      }
      int64_t s_new = lab ? (j == 0 ? sym[src] + 1 : 1) : 0;
      int64_t t_new = tmin + j + (lab ? 0 : 1);
      if (a_.max_symbols >= 0 && lab && s_new >= a_.max_symbols) {
        t_new += 1;
        s_new = 0;
      }
      pool_score_.push_back(new_score_[h] + val);
      const int64_t at = static_cast<int64_t>(pool_lm_.size());
      pool_lm_.resize(pool_lm_.size() + static_cast<size_t>(NM));
      if (lab) {
        if (!fusion_.next(base + src, fst + src * NM, tok, pool_lm_.data() + at)) return asrd::invalid_fusion_state(b, src);
      } else {
        std::copy(fst + src * NM, fst + (src + 1) * NM, pool_lm_.begin() + at);
      }
      pool_.push_back(Entry{t_new, s_new, lab ? asrd::extend_hash(hsh[src], tok) : hsh[src], nl[src] + (lab ? 1 : 0),
                            lab ? tok : last[src], src, lab ? tok : -1, tmin + j, at});
    }
    return "";
  }

  // Weighted fusion score of `tok` for popped hypothesis h = b * K + k (memoised per step).
  bool lm_of(int64_t h, int64_t row, const int64_t* st, int64_t tok, T* out) {
    const size_t at = static_cast<size_t>(h * V_ + tok);
    if (lm_done_[at] != stamp_) {
      if (!fusion_.score(row, st, tok, &lm_full_[at])) return false;
      lm_done_[at] = stamp_;
    }
    *out = lm_full_[at];
    return true;
  }

  // Step 5: every frame list with its arrivals: equal transcripts merged into the best (first on ties) by
  // log-sum-exp, the K best of each list kept (slots r * K + k), the state and the tree rewritten.
  std::string merge(int64_t b) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, S = S_, NM = NM_;
    const int64_t base = b * S;
    const int64_t P = static_cast<int64_t>(pool_.size());
    merged_.assign(pool_score_.begin(), pool_score_.end());
    merge_groups(P);
    T* score = static_cast<T*>(a_.score) + base;
    int64_t* fst = a_.lm_states + base * NM;
    out_score_.assign(static_cast<size_t>(S), ninf);
    out_pick_.assign(static_cast<size_t>(S), -1);
    for (int64_t r = 0; r < R_; ++r) {
      top_.reset(K);
      for (int64_t i = 0; i < P; ++i)
        if (merged_[i] > ninf && (a_.offset[b] + pool_[i].time) % R_ == r) top_.push(merged_[i], i, 0);
      auto& best = top_.sorted();
      for (int64_t q = 0; q < static_cast<int64_t>(best.size()); ++q) {
        out_score_[r * K + q] = best[q].value;
        out_pick_[r * K + q] = best[q].index;
      }
    }
    int64_t* time = a_.time + base;
    int64_t* sym = a_.symbols + base;
    int64_t* hsh = a_.hash + base;
    int64_t* nl = a_.nlabels + base;
    int64_t* last = a_.last + base;
    new_lm_.resize(static_cast<size_t>(S * NM));
    for (int64_t s = 0; s < S; ++s) {
      const int64_t i = out_pick_[s];
      const int64_t r = base + s;
      if (i < 0) {  // an empty slot
        score[s] = ninf;
        a_.tok_out[r] = -1;
        a_.par_out[r] = s;
        a_.dat_out[r] = 0;
        a_.parent_flat[r] = r;
        a_.emitted[r] = 0;
        a_.labels[r] = a_.blank;
        std::copy(fst + s * NM, fst + (s + 1) * NM, new_lm_.begin() + s * NM);
        new_time_[s] = time[s];
        new_sym_[s] = sym[s];
        new_hash_[s] = hsh[s];
        new_nl_[s] = nl[s];
        new_last_[s] = last[s];
        continue;
      }
      const Entry& e = pool_[i];
      score[s] = out_score_[s];
      a_.tok_out[r] = e.tok;
      a_.par_out[r] = e.src;
      a_.dat_out[r] = a_.offset[b] + e.frame;
      a_.parent_flat[r] = base + e.src;
      a_.emitted[r] = e.tok >= 0;
      a_.labels[r] = e.tok >= 0 ? e.tok : a_.blank;
      std::copy(pool_lm_.begin() + e.lm, pool_lm_.begin() + e.lm + NM, new_lm_.begin() + s * NM);
      new_time_[s] = e.time;
      new_sym_[s] = e.sym;
      new_hash_[s] = e.hash;
      new_nl_[s] = e.nl;
      new_last_[s] = e.last;
    }
    for (int64_t s = 0; s < S; ++s) {
      time[s] = new_time_[s];
      sym[s] = new_sym_[s];
      hsh[s] = new_hash_[s];
      nl[s] = new_nl_[s];
      last[s] = new_last_[s];
    }
    std::copy(new_lm_.begin(), new_lm_.begin() + S * NM, fst);
    return "";
  }

  static bool same(const Entry& x, const Entry& y) {
    return x.hash == y.hash && x.time == y.time && x.nl == y.nl && x.last == y.last;
  }

  // merged_[i] for the valid pool entries: equal transcripts (same()) form a group; its leader (best score,
  // the lower index on ties) gets mx + log(sum_j exp(s_j - mx)) summed in pool order, the others -inf.
  // The groups come from one sort by (transcript key, index): O(P log P) (a pairwise scan was O(P^2), with
  // P = (window + 1) * beam + beam^2 entries: O(beam^4) per step).
  void merge_groups(int64_t P) {
    const T ninf = asrd::neg_inf<T>();
    group_.clear();
    for (int64_t i = 0; i < P; ++i)
      if (pool_score_[i] > ninf) group_.push_back(i);
    std::sort(group_.begin(), group_.end(), [this](int64_t a, int64_t c) {
      const Entry& x = pool_[a];
      const Entry& y = pool_[c];
      if (x.hash != y.hash) return x.hash < y.hash;
      if (x.time != y.time) return x.time < y.time;
      if (x.nl != y.nl) return x.nl < y.nl;
      if (x.last != y.last) return x.last < y.last;
      return a < c;
    });
    const size_t n = group_.size();
    for (size_t g0 = 0, g1 = 0; g0 < n; g0 = g1) {
      int64_t leader = group_[g0];
      for (g1 = g0 + 1; g1 < n && same(pool_[group_[g0]], pool_[group_[g1]]); ++g1)
        if (pool_score_[group_[g1]] > pool_score_[leader]) leader = group_[g1];
      const T mx = pool_score_[leader];
      T sum = T(0);
      for (size_t q = g0; q < g1; ++q) {
        sum += std::exp(pool_score_[group_[q]] - mx);
        merged_[group_[q]] = ninf;
      }
      merged_[leader] = mx + std::log(sum);
    }
  }

  const WindArgs& a_;
  const int64_t K_, V_, W_, R_, S_, NM_, BK_;
  const asrd::Fusion<T> fusion_;
  const WindJoint<T> joint_;
  const bool full_window_;
  bool can_stop_ = false;
  T lam_, beta_;
  int64_t stamp_ = 0;
  std::vector<Ctx> ctx_;                  // [B] the stepping utterances' contexts
  // per popped hypothesis h = b * K + k: its score before / after the prefix search, the running blank
  // sums (fused, acoustic), the acoustic whole-window blank, the largest label fusion score, its best
  std::vector<T> p_score_, new_score_, cum_, cum_ac_, whole_ac_, lm_max_;
  std::vector<uint8_t> live_, removed_, open_, lm_max_done_;
  std::vector<asrd::TopK<T, T>> tops_;    // payload: the candidate's score without fusion
  std::vector<T> lm_full_;                // [B*K, V] memoised fusion scores (lm_done_: the step's stamp)
  std::vector<int64_t> lm_done_;
  std::vector<T> lp0_, row0_, lp_, row_;  // frame 0 of an utterance's hypotheses [K, V]; a later frame [V]
  std::vector<T> terms_;
  std::vector<int64_t> sel_;  // the columns of a frame worth a look
  std::vector<int64_t> req_, enc_rows_, dec_rows_;  // a round's hypotheses and their joint rows
  std::vector<const T*> rows_;                      // their logits
  std::vector<Entry> pool_;
  std::vector<T> pool_score_, merged_, out_score_;
  std::vector<int64_t> pool_lm_, out_pick_, new_lm_, group_;
  std::vector<int64_t> new_time_ = std::vector<int64_t>(static_cast<size_t>(S_)),
                       new_sym_ = std::vector<int64_t>(static_cast<size_t>(S_)),
                       new_hash_ = std::vector<int64_t>(static_cast<size_t>(S_)),
                       new_nl_ = std::vector<int64_t>(static_cast<size_t>(S_)),
                       new_last_ = std::vector<int64_t>(static_cast<size_t>(S_));
  asrd::TopK<T, int> top_;
};

}  // namespace twind
}  // namespace asrd
