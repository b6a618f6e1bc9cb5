// One ALSD++ / AES++ step of the batched transducer beam search on the native engine (TransducerBeamStep):
// the bookkeeping of one search step (log-softmax of the joint rows, fusion scores, the top `beam`
// candidates with the carried hypotheses, merging of equal transcripts, the state update, the tree
// records and the hypotheses the next step expands) for every utterance, in place on the [B, K] state
// arrays of a TransducerBeamArgs. Shared by the per-step entry point (transducer_beam.cpp: the networks
// run in torch between the steps) and the whole search with the networks in C++ (transducer_beam_net.cpp).
//
// Same rules and the same arithmetic order as the tensor step (BeamLoop.step / _select): candidates
// `score + ((lp_tok + lp_dur) + add)` (late pruning) or `(score + top_acoustic) + add` (early), the K best
// with ties to the lower candidate index, then equal (hash, frame, length, last token) hypotheses merged
// into the best one by log-sum-exp.
#pragma once

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "transducer_common.h"

namespace asrd {
namespace tbeam {

using asrd::TransducerBeamArgs;


struct Pick {
  int64_t k;     // parent slot
  int64_t c;     // candidate token * D + duration index; -1: the carried hypothesis
};

// The expanding slots of `active [B, K]` in order (joint_rows[:n]), their encoder rows b * T + min(time, T - 1)
// (frame_rows[:n]) and each one's position among them (logit_pos); returns n.
inline int64_t joint_rows(int64_t batch, int64_t beam, int64_t frames, const int64_t* time, const uint8_t* active,
                   int64_t* frame_rows, int64_t* rows, int64_t* logit_pos) {
  const int64_t last_frame = std::max<int64_t>(frames - 1, 0);
  int64_t n = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t k = 0; k < beam; ++k) {
      const int64_t r = b * beam + k;
      if (!active[r]) continue;
      rows[n] = r;
      frame_rows[n] = b * frames + std::min(time[r], last_frame);
      logit_pos[r] = n++;
    }
  return n;
}

template <typename T>
class TransducerBeamStep {
 public:
  explicit TransducerBeamStep(const TransducerBeamArgs& a)
      : a_(a), K_(a.beam), V_(a.vocab), D_(a.num_durations), NM_(a.num_models), fusion_(a.models, a.num_models, a.vocab) {
    lp_.resize(static_cast<size_t>(K_ * V_));
    lpd_.resize(static_cast<size_t>(K_ * D_));
    sel_val_.resize(static_cast<size_t>(K_));
    sel_.resize(static_cast<size_t>(K_));
    n_time_.resize(static_cast<size_t>(K_));
    n_sym_.resize(static_cast<size_t>(K_));
    n_hash_.resize(static_cast<size_t>(K_));
    n_nl_.resize(static_cast<size_t>(K_));
    n_last_.resize(static_cast<size_t>(K_));
    n_ok_.resize(static_cast<size_t>(K_));
    n_emit_.resize(static_cast<size_t>(K_));
    n_lm_.resize(static_cast<size_t>(K_ * std::max<int64_t>(NM_, 1)));
    old_lm_.resize(static_cast<size_t>(K_ * std::max<int64_t>(NM_, 1)));
    lam_ = static_cast<T>(a.lam);
    beta_ = static_cast<T>(a.beta);
  }

  std::string run() {
    if (a_.logit_cols != a_.logit_stride)
      return "joint output has " + std::to_string(a_.logit_cols) + " columns, expected " +
             std::to_string(a_.logit_stride) + " (vocab_size" + (a_.tdt ? " + durations)" : ")");
    int64_t n_emit = 0;
    for (int64_t b = 0; b < a_.batch; ++b) {
      std::string err = step(b);
      if (!err.empty()) return err;
      update_active(b);
    }
    for (int64_t r = 0; r < a_.batch * K_; ++r)
      if (a_.emitted[r]) a_.emit_rows[n_emit++] = r;
    a_.counts[0] = joint_rows(a_.batch, K_, a_.frames, a_.time, a_.active, a_.frame_rows, a_.joint_rows,
                              a_.logit_pos);
    a_.counts[1] = n_emit;
    return "";
  }

 private:
  std::string step(int64_t b) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, V = V_, D = D_, C = V * D;
    const int64_t base = b * K;
    T* score = static_cast<T*>(a_.score) + base;
    uint8_t* act = a_.active + base;
    const T* logits = static_cast<const T*>(a_.logits);
    const bool fused = NM_ > 0;
    heap_.reset(K);
    if (fused)  // the LM rows the candidates will read, fetched while the log-softmaxes run
      for (int64_t k = 0; k < K; ++k)
        if (act[k]) fusion_.prefetch(a_.lm_states + (base + k) * NM_);

    for (int64_t k = 0; k < K; ++k) {
      const int64_t row = base + k;
      if (!act[k]) {  // waiting / finished hypotheses are carried as they are
        const int64_t width = a_.early ? K + 1 : C + 1;
        if (score[k] > ninf) heap_.push(score[k], k * width + (width - 1), Pick{k, -1});
        continue;
      }
      T* lp = lp_.data() + k * V;
      T* lpd = lpd_.data() + k * D;
      const int64_t pos = a_.logit_pos[row];
      if (pos < 0 || pos >= a_.logit_rows)
        return "joint output has " + std::to_string(a_.logit_rows) + " rows, the step reads row " + std::to_string(pos);
      const T* x = logits + pos * a_.logit_stride;
      asrd::check_joint_row(x, V);
      asrd::log_softmax(x, V, lp);
      if (a_.tdt) {
        asrd::check_joint_row(x + V, D);
        asrd::log_softmax(x + V, D, lpd);
      }
      const T lpb = lp[a_.blank];
      // (weigh: a masked class's -inf stays -inf at lam <= 0, never NaN or +inf)
      const T blank_add = a_.lm_weighted ? asrd::weigh(lpb, lam_) : T(0);
      T nonblank_add = a_.lm_weighted ? asrd::weigh(asrd::log_nonblank_mass(lp, V, a_.blank), lam_) : T(0);
      if (beta_ != T(0)) nonblank_add = nonblank_add + beta_;
      const int64_t* st = a_.lm_states + row * NM_;
      const T s = score[k];
      if (!a_.early) {
        const int64_t width = C + 1;
        T lpd_max = lpd[0];
        for (int64_t d = 1; d < D; ++d) lpd_max = std::max(lpd_max, lpd[d]);
        // a label's candidates are `score + ((lp + lpd) + (lm + nonblank_add))`; when lm <= 0 (or no
        // fusion) `score + ((lp + max lpd) + nonblank_add)` bounds all of them (float addition is
        // monotone), so a token whose bound cannot enter is skipped before its fusion look-up
        const bool bounded = !fused || fusion_.bounded();
        const int64_t vb = a_.blank;  // the blank first: usually the best, it raises the bar early
        for (int64_t d = 0; d < D; ++d) {
          const T val = s + ((a_.tdt ? lp[vb] + lpd[d] : lp[vb]) + blank_add);
          if (val > ninf) heap_.push(val, k * width + vb * D + d, Pick{k, vb * D + d});
        }
        const int64_t nv = label_candidates(lp, bounded, s, nonblank_add, lpd_max);
        for (int64_t i = 0; i < nv; ++i) {
          const int64_t v = cand_[static_cast<size_t>(i)];
          if (v == vb) continue;
          if (bounded && !heap_.admits(s + ((a_.tdt ? lp[v] + lpd_max : lp[v]) + nonblank_add), k * width + v * D))
            continue;
          T lm = T(0);
          if (fused && !fusion_.score(row, st, v, &lm)) return asrd::invalid_fusion_state(b, k);
          const T add = lm + nonblank_add;
          for (int64_t d = 0; d < D; ++d) {
            const T val = s + ((a_.tdt ? lp[v] + lpd[d] : lp[v]) + add);
            if (val > ninf) heap_.push(val, k * width + v * D + d, Pick{k, v * D + d});
          }
        }
      } else {
        std::string err = early_candidates(b, k, row, s, lp, lpd, blank_add, nonblank_add);
        if (!err.empty()) return err;
      }
    }
    return select_and_update(b);
  }

  // The labels whose candidates may enter the heap, in id order, into cand_ (their number returned): every
  // label, or (bounded scores, a full heap) those whose log-prob lp[v] reaches the least value that could
  // still enter, lowered by a margin far above float rounding; the exact test is made on each one after.
  int64_t label_candidates(const T* lp, bool bounded, T s, T nonblank_add, T lpd_max) {
    const int64_t V = V_;
    cand_.resize(static_cast<size_t>(V));
    int64_t n = 0;
    if (!bounded || !heap_.full() || !std::isfinite(nonblank_add) || !std::isfinite(lpd_max)) {
      for (int64_t v = 0; v < V; ++v) cand_[static_cast<size_t>(n++)] = v;
      return n;
    }
    const T worst = heap_.worst_value();
    const T extra = a_.tdt ? lpd_max : T(0);
    const T margin = T(1e-3) * (T(1) + std::abs(worst) + std::abs(s) + std::abs(nonblank_add) + std::abs(extra));
    const T thr = ((worst - s) - nonblank_add - extra) - margin;
    for (int64_t v = 0; v < V; ++v) {
      cand_[static_cast<size_t>(n)] = v;
      n += lp[v] >= thr ? 1 : 0;
    }
    return n;
  }

  // Early pruning: hypothesis k's K best acoustic candidates (lp [V], lpd [D]), then their fusion scores,
  // into the heap of the K best overall.
  std::string early_candidates(int64_t b, int64_t k, int64_t row, T s, const T* lp, const T* lpd, T blank_add,
                               T nonblank_add) {
    const int64_t K = K_, V = V_, D = D_;
    const T ninf = asrd::neg_inf<T>();
    const bool fused = NM_ > 0;
    const int64_t* st = a_.lm_states + row * NM_;
    // each hypothesis's K best acoustic candidates, then fusion, then the K best overall
    top_.reset(K);
    for (int64_t v = 0; v < V; ++v)
      for (int64_t d = 0; d < D; ++d) {
        const T ac = a_.tdt ? lp[v] + lpd[d] : lp[v];
        top_.push(ac, v * D + d, 0);
      }
    auto& best = top_.sorted();
    const int64_t width = K + 1;
    for (int64_t j = 0; j < static_cast<int64_t>(best.size()); ++j) {
      const int64_t c = best[j].index;
      const int64_t tok = c / D;
      T add;
      if (tok == a_.blank) {
        add = blank_add;
      } else {
        T lm = T(0);
        if (fused && !fusion_.score(row, st, tok, &lm)) return asrd::invalid_fusion_state(b, k);
        add = lm + nonblank_add;
      }
      const T val = (s + best[j].value) + add;
      if (!(val > ninf)) continue;
      heap_.push(val, k * width + j, Pick{k, c});
    }
    return "";
  }

  // The selected candidates (best first) become the new hypotheses of utterance b.
  std::string select_and_update(int64_t b) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, D = D_;
    const int64_t base = b * K;
    T* score = static_cast<T*>(a_.score) + base;
    int64_t* time = a_.time + base;
    int64_t* sym = a_.symbols + base;
    int64_t* hsh = a_.hash + base;
    int64_t* nl = a_.nlabels + base;
    int64_t* last = a_.last + base;
    int64_t* fst = a_.lm_states + base * NM_;
    const int64_t len = a_.lengths[b];
    const bool fin = a_.final_chunk[b] != 0;
    auto& picked = heap_.sorted();
    const int64_t n = static_cast<int64_t>(picked.size());
    std::copy(fst, fst + K * NM_, old_lm_.begin());
    for (int64_t j = 0; j < K; ++j) {
      const bool ok = j < n && picked[j].value > ninf;
      const int64_t k = j < n ? picked[j].payload.k : j;
      const int64_t c = j < n ? picked[j].payload.c : -1;
      sel_val_[j] = ok ? picked[j].value : ninf;
      sel_[j] = Pick{k, c};
      const bool carry = c < 0;
      const int64_t tok = carry ? a_.blank : c / D;
      const int64_t dur = carry ? 0 : a_.durations[c % D];
      const bool emit = ok && !carry && tok != a_.blank;
      const bool blanked = ok && !carry && tok == a_.blank;
      const int64_t label_adv = a_.tdt ? dur : 0;
      const int64_t blank_adv = a_.tdt ? std::max<int64_t>(dur, 1) : 1;
      const int64_t p_time = time[k], p_sym = sym[k];
      int64_t symbols = emit ? (label_adv == 0 ? p_sym + 1 : 0) : (blanked ? 0 : p_sym);
      int64_t adv = emit ? label_adv : (blanked ? blank_adv : 0);
      if (a_.max_symbols >= 0 && emit && label_adv == 0 && symbols >= a_.max_symbols) {
        adv += 1;
        symbols = 0;
      }
      int64_t t = p_time + adv;
      if (fin) t = std::min(t, len);
      n_ok_[j] = ok;
      n_emit_[j] = emit;
      n_time_[j] = t;
      n_sym_[j] = symbols;
      n_hash_[j] = emit ? asrd::extend_hash(hsh[k], tok) : hsh[k];
      n_nl_[j] = nl[k] + (emit ? 1 : 0);
      n_last_[j] = emit ? tok : last[k];
      const int64_t* st = old_lm_.data() + k * NM_;
      if (emit) {
        if (!fusion_.next(base + k, st, tok, n_lm_.data() + j * NM_)) return asrd::invalid_fusion_state(b, k);
      } else {
        std::copy(st, st + NM_, n_lm_.begin() + j * NM_);
      }
      const int64_t r = base + j;
      a_.tok_out[r] = emit ? tok : -1;
      a_.par_out[r] = k;
      a_.dat_out[r] = (a_.offset[b] + p_time) * a_.pack + label_adv;
      a_.parent_flat[r] = base + k;
      a_.emitted[r] = emit;
      a_.labels[r] = emit ? tok : a_.blank;
      if (a_.selected_ok) a_.selected_ok[r] = ok;
    }
    merge_equal(score);
    for (int64_t j = 0; j < K; ++j) {
      time[j] = n_time_[j];
      sym[j] = n_sym_[j];
      hsh[j] = n_hash_[j];
      nl[j] = n_nl_[j];
      last[j] = n_last_[j];
    }
    std::copy(n_lm_.begin(), n_lm_.begin() + K * NM_, fst);
    return "";
  }

  // Equal transcripts on the same frame: the best (first) one keeps the group's log-sum-exp into score [K].
  void merge_equal(T* score) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_;
    for (int64_t i = 0; i < K; ++i) {
      if (!n_ok_[i]) {
        score[i] = ninf;
        continue;
      }
      bool leader = true;
      T mx = sel_val_[i];
      for (int64_t j = 0; j < K && leader; ++j) {
        if (j == i || !n_ok_[j] || !same(i, j)) continue;
        if (sel_val_[j] > sel_val_[i] || (sel_val_[j] == sel_val_[i] && j < i)) leader = false;
        mx = std::max(mx, sel_val_[j]);
      }
      if (!leader) {
        score[i] = ninf;
        continue;
      }
      T sum = T(0);
      for (int64_t j = 0; j < K; ++j)
        if (n_ok_[j] && same(i, j)) sum += std::exp(sel_val_[j] - mx);
      score[i] = mx + std::log(sum);
    }
  }

  bool same(int64_t i, int64_t j) const {
    return n_hash_[i] == n_hash_[j] && n_time_[i] == n_time_[j] && n_nl_[i] == n_nl_[j] && n_last_[i] == n_last_[j];
  }

  // The hypotheses of utterance b the next step expands (BeamLoop._expanding); also how a search that starts
  // from a carried state (a stream's next chunk) finds its first step's hypotheses.
 public:
  void update_active(int64_t b) {
    const T ninf = asrd::neg_inf<T>();
    const int64_t K = K_, base = b * K;
    const T* score = static_cast<const T*>(a_.score) + base;
    const int64_t* time = a_.time + base;
    const int64_t len = a_.lengths[b];
    uint8_t* act = a_.active + base;
    if (!a_.aes) {
      bool paused = false;
      if (!a_.final_chunk[b])
        for (int64_t k = 0; k < K; ++k) paused = paused || (score[k] > ninf && time[k] >= len);
      for (int64_t k = 0; k < K; ++k) act[k] = !paused && score[k] > ninf && time[k] < len;
    } else {
      int64_t tmin = std::numeric_limits<int64_t>::max();
      for (int64_t k = 0; k < K; ++k)
        if (score[k] > ninf && time[k] < len) tmin = std::min(tmin, time[k]);
      for (int64_t k = 0; k < K; ++k) act[k] = score[k] > ninf && time[k] < len && time[k] == tmin;
    }
  }

 private:
  const TransducerBeamArgs& a_;
  const int64_t K_, V_, D_, NM_;
  const asrd::Fusion<T> fusion_;
  T lam_, beta_;
  std::vector<T> lp_, lpd_, sel_val_;
  std::vector<int64_t> cand_;
  std::vector<Pick> sel_;
  std::vector<int64_t> n_time_, n_sym_, n_hash_, n_nl_, n_last_, n_lm_, old_lm_;
  std::vector<uint8_t> n_ok_, n_emit_;
  asrd::TopK<T, Pick> heap_;
  asrd::TopK<T, int> top_;
};

}  // namespace tbeam
}  // namespace asrd
