// One WIND beam search step of asrdecode.transducer.beam (method="wind") on the native engine: the
// bookkeeping of one step (BeamLoop._wind_step) for every utterance, in place on the [B, S] state arrays
// of a WindArgs (S = (window + 1) * beam: a ring of per-frame lists of `beam` slots). Shared by the
// per-step entry points (transducer_wind.cpp: the networks run in torch between the calls) and the whole
// search with the networks in C++ (transducer_beam_net.cpp).
//
// wind_pop picks each stepping utterance's earliest frame list and says which (hypothesis, window frame)
// pairs the joint must score (a popped live hypothesis on every window frame inside the utterance); the
// caller runs the joint on those rows. WindStep then does the rest: log-softmax, Equation 1 over the
// window, the prefix search, each expanding hypothesis's `beam` best (label, frame) or whole-window-blank
// continuations, and every frame list merged with its arrivals (equal transcripts by log-sum-exp) and
// pruned to `beam`; it writes the tree records, the parents (whose prediction-network states the caller
// moves) and the emitting rows (where it runs the network). Same rules and arithmetic order as the tensor
// step; ties go to the lower candidate / pool index.
#pragma once

#include <algorithm>
#include <cstring>
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

template <typename T>
class WindStep {
 public:
  explicit WindStep(const WindArgs& a)
      : a_(a), K_(a.beam), V_(a.vocab), W_(a.window), R_(a.window + 1), S_((a.window + 1) * a.beam),
        NM_(a.num_models), fusion_(a.models, a.num_models, a.vocab) {
    lp_.resize(static_cast<size_t>(K_ * W_ * V_));
    no_lm_.resize(static_cast<size_t>(K_ * W_ * V_));
    lm_full_.resize(static_cast<size_t>(K_ * V_));
    lm_done_.resize(static_cast<size_t>(K_ * V_));
    lam_ = static_cast<T>(a.lam);
    beta_ = static_cast<T>(a.beta);
  }

  std::string run() {
    if (a_.logit_cols != V_)
      return "joint output has " + std::to_string(a_.logit_cols) + " columns, expected vocab_size " + std::to_string(V_);
    int64_t n_emit = 0, stepping = 0;
    for (int64_t b = 0; b < a_.batch; ++b) {
      const int64_t base = b * S_;
      if (a_.active[b]) {
        std::string err = step(b);
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

  std::string step(int64_t b) {
    const int64_t base = b * S_, tmin = a_.tmin[b];
    const Ctx c{b, base, tmin, (a_.offset[b] + tmin) % R_, std::min(W_, a_.lengths[b] - tmin),
                static_cast<T*>(a_.score) + base, a_.time + base, a_.symbols + base, a_.hash + base,
                a_.nlabels + base, a_.last + base, a_.lm_states + base * NM_, a_.row_of + b * K_ * W_};
    ++stamp_;
    std::string err = window_scores(c);
    if (err.empty()) err = prefix_search(c);
    if (!err.empty()) return err;
    seed_pool(c);
    for (int64_t k = 0; k < K_; ++k) {
      err = expand(c, k);
      if (!err.empty()) return err;
    }
    return merge(b);
  }

  // Step 2: Equation 1 over the window for each popped live hypothesis k (slot r0 * K + k).
  std::string window_scores(const Ctx& c) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, V = V_, W = W_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    const T* logits = static_cast<const T*>(a_.logits);
    p_score_.assign(static_cast<size_t>(K), ninf);
    live_.assign(static_cast<size_t>(K), 0);
    whole_ac_.assign(static_cast<size_t>(K), T(0));
    before_ac_.assign(static_cast<size_t>(K * W), T(0));
    for (int64_t k = 0; k < K; ++k) {
      const int64_t slot = r0 * K + k;
      if (!(score[slot] > ninf) || row_of[k * W] < 0) continue;
      live_[k] = 1;
      p_score_[k] = score[slot];
      T cum = T(0), cum_ac = T(0);
      for (int64_t j = 0; j < n; ++j) {
        T* lp = lp_.data() + (k * W + j) * V;
        const int64_t at = row_of[k * W + j];
        if (at < 0 || at >= a_.logit_rows)
          return "joint output has " + std::to_string(a_.logit_rows) + " rows, the step reads row " + std::to_string(at);
        asrd::log_softmax(logits + at * V, V, lp);
        const T lpb = lp[a_.blank];
        const T blank_fr = a_.lm_weighted ? (T(1) + lam_) * lpb : lpb;
        const T nonblank = a_.lm_weighted ? lam_ * std::log1p(-std::exp(lpb)) : T(0);
        // the tensor step: cumsum(blank_fr) - blank_fr + nonblank + beta (cum: the sum before frame j)
        const T next_cum = cum + blank_fr;
        const T label_base = ((next_cum - blank_fr) + nonblank) + beta_;
        T* row = no_lm_.data() + (k * W + j) * V;
        for (int64_t v = 0; v < V; ++v) row[v] = label_base + lp[v];
        row[a_.blank] = ninf;
        before_ac_[k * W + j] = (cum_ac + lpb) - lpb;
        cum = next_cum;
        cum_ac = cum_ac + lpb;
      }
      whole_ac_[k] = cum_ac;
      no_lm_[(k * W + (n - 1)) * V + a_.blank] = cum;  // blank on the whole window
    }

    return "";
  }

  // Step 3: prefix search. B = A + (v,) on this frame gets A's paths "then v here"; A is removed.
  std::string prefix_search(const Ctx& c) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, V = V_, W = W_, NM = NM_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    const bool fused = NM > 0;
    new_score_.assign(p_score_.begin(), p_score_.end());
    removed_.assign(static_cast<size_t>(K), 0);
    for (int64_t bi = 0; bi < K; ++bi) {
      if (!live_[bi]) continue;
      const int64_t sb = r0 * K + bi;
      terms_.clear();
      terms_.push_back(p_score_[bi]);
      for (int64_t ai = 0; ai < K; ++ai) {
        const int64_t sa = r0 * K + ai;
        T complete = ninf;
        const bool pair = live_[ai] && nl[sb] == nl[sa] + 1 && hsh[sb] == asrd::extend_hash(hsh[sa], last[sb]) &&
                          (a_.max_symbols < 0 || sym[sa] + 1 < a_.max_symbols);
        if (pair) {
          T lm_v = T(0);
          if (fused && !lm_of(ai, base + sa, fst + sa * NM, last[sb], &lm_v)) return asrd::invalid_fusion_state(b, sa);
          complete = (p_score_[ai] + no_lm_[(ai * W) * V + last[sb]]) + lm_v;
          removed_[ai] = 1;
        }
        terms_.push_back(complete);
      }
      T mx = ninf;
      for (const T t : terms_) mx = std::max(mx, t);
      if (mx > ninf) {
        T sum = T(0);
        for (const T t : terms_) sum += std::exp(t - mx);
        new_score_[bi] = mx + std::log(sum);
      }
    }

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

  // Step 4: popped hypothesis k's K best continuations into the pool.
  std::string expand(const Ctx& c, int64_t k) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, V = V_, W = W_, NM = NM_;
    const auto& [b, base, tmin, r0, n, score, time, sym, hsh, nl, last, fst, row_of] = c;
    const bool fused = NM > 0;
    const int64_t src = r0 * K + k;
    const bool expand = live_[k] && !removed_[k];
    top_.reset(K);
    if (expand) {
      const int64_t* st = fst + src * NM;
      if (!a_.early) {
        const bool bounded = !fused || fusion_.bounded();
        for (int64_t j = 0; j < n; ++j) {
          const T* row = no_lm_.data() + (k * W + j) * V;
          for (int64_t v = 0; v < V; ++v) {
            const int64_t col = j * V + v;
            T val = row[v];
            if (!(val > ninf)) continue;
            if (v != a_.blank && fused) {
              if (bounded && !top_.admits(val, col)) continue;  // fusion only lowers it
              T lm;
              if (!lm_of(k, base + src, st, v, &lm)) return asrd::invalid_fusion_state(b, src);
              val = val + lm;
            }
            top_.push(val, col, 0);
          }
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const T* lp = lp_.data() + (k * W + j) * V;
          const T bac = before_ac_[k * W + j];
          for (int64_t v = 0; v < V; ++v) {
            const T ac = v == a_.blank ? (j == n - 1 ? whole_ac_[k] : ninf) : bac + lp[v];
            if (ac > ninf) top_.push(ac, j * V + v, 0);
          }
        }
      }
    }
    auto& best = top_.sorted();
    for (int64_t q = 0; q < K; ++q) {
      if (!expand || q >= static_cast<int64_t>(best.size()) ||
          (a_.has_gamma && best[q].value < best[0].value - static_cast<T>(a_.gamma))) {
        pool_score_.push_back(ninf);
        pool_.push_back(Entry{0, 0, 0, 0, a_.blank, src, -1, 0, 0});
        continue;
      }
      const int64_t col = best[q].index;
      const int64_t tok = col % V, j = col / V;
      const bool lab = tok != a_.blank;
      T val = no_lm_[(k * W + j) * V + tok];
      if (a_.early && lab && fused) {
        T lm;
        if (!lm_of(k, base + src, fst + src * NM, tok, &lm)) return asrd::invalid_fusion_state(b, src);
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
      pool_score_.push_back(new_score_[k] + val);
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

  // Weighted fusion score of `tok` for popped hypothesis k (memoised per step).
  bool lm_of(int64_t k, int64_t row, const int64_t* st, int64_t tok, T* out) {
    const size_t at = static_cast<size_t>(k * V_ + tok);
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
  const int64_t K_, V_, W_, R_, S_, NM_;
  const asrd::Fusion<T> fusion_;
  T lam_, beta_;
  int64_t stamp_ = 0;
  std::vector<T> lp_, no_lm_, lm_full_, p_score_, new_score_, whole_ac_, before_ac_, terms_;
  std::vector<int64_t> lm_done_;
  std::vector<uint8_t> live_, removed_;
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
