// What the transducer beam steps (transducer_beam.cpp: ALSD++ / AES++, transducer_wind.cpp: WIND) share:
// the fusion models' description (the layout of native/ctc_beam.py's _Model) with their weighted
// score, and the log-softmax of a joint row.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "engine.h"
#include "guard.h"

namespace asrd {


// The fusion models of a search, scored as FusionScorer does: sum_i score_i * weight_i in the state dtype.
template <typename T>
class Fusion {
 public:
  Fusion(const FusionDesc* models, int64_t num_models, int64_t vocab) : m_(models), n_(num_models), V_(vocab) {
    for (int64_t i = 0; i < n_; ++i) {
      w_.push_back(static_cast<T>(m_[i].weight));
      bounded_ = bounded_ && m_[i].kind != 1 && m_[i].nonpositive && m_[i].weight >= 0.0;
    }
  }
  int64_t size() const { return n_; }
  // Whether every weighted score is <= 0 (a candidate's acoustic score then bounds its fused one).
  bool bounded() const { return bounded_; }

  // Score and next state of `tok` for model i from `state` (row: the hypothesis's row of kind-1 rows).
  bool model_score(int64_t i, int64_t row, int64_t state, int64_t tok, T* score, int64_t* next) const {
    const FusionDesc& m = m_[i];
    if (m.kind == 0 || m.kind == 2) {
      float s;
      const bool ok = m.kind == 0 ? automaton_score(m.automaton, state, tok, &s, next)
                                  : word_lm_score(*m.word, state, tok, &s, next);
      if (!ok) return false;
      *score = static_cast<T>(s);
      return true;
    }
    const int64_t at = row * V_ + tok;
    *score = static_cast<const T*>(m.rows_scores)[at];
    *next = m.rows_next[at];
    return true;
  }

  // Weighted score of `tok` from the states `st [n]` of row `row`; false: an invalid state.
  bool score(int64_t row, const int64_t* st, int64_t tok, T* out) const {
    T total = T(0);
    for (int64_t i = 0; i < n_; ++i) {
      T s;
      int64_t nx;
      if (!model_score(i, row, st[i], tok, &s, &nx)) return false;
      const T term = weigh(s, w_[i]);
      total = i == 0 ? term : total + term;
    }
    *out = total;
    return true;
  }

  // A cache hint for scoring from the states `st [n]`: the dense score rows of the automata's states that
  // have one (look-ups there miss the cache otherwise). No effect on any result.
  void prefetch(const int64_t* st) const {
    for (int64_t i = 0; i < n_; ++i) {
      if (m_[i].kind != 0) continue;
      const Automaton& a = m_[i].automaton;
      if (st[i] < 0 || st[i] >= a.num_states) continue;
      const int64_t d = a.dense_index[st[i]];
      if (d < 0) continue;
      const float* row = a.dense_scores + d * a.vocab;
      for (int64_t j = 0; j < a.vocab; j += 16) __builtin_prefetch(row + j);
    }
  }

  // The states after `tok` from `st [n]` into `out [n]`; false: an invalid state.
  bool next(int64_t row, const int64_t* st, int64_t tok, int64_t* out) const {
    for (int64_t i = 0; i < n_; ++i) {
      T s;
      if (!model_score(i, row, st[i], tok, &s, &out[i])) return false;
    }
    return true;
  }

 private:
  const FusionDesc* m_;
  int64_t n_, V_;
  std::vector<T> w_;
  bool bounded_ = true;
};

// log_softmax of one row x [n] into out: (x - max) - log(sum exp(x - max)), as torch computes it
// (float32: the sum four lanes at a time, sum_exp_shifted).
template <typename T>
inline void log_softmax(const T* x, int64_t n, T* out) {
  T mx = neg_inf<T>();
  T sum;
  if constexpr (std::is_same_v<T, float>) {
    mx = max_of(x, n);
    sum = sum_exp_shifted(x, n, mx);
  } else {
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
    sum = T(0);
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
  }
  const T lse = std::log(sum);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mx) - lse;
}

// log(1 - p[blank]) of Eq. 3 from the row's log-probabilities lp [n] (blank's included) as the log-sum-exp
// of the other columns (transducer/blank_scoring.py): finite whenever a label's probability is, where
// log1p(-exp(lp[blank])) is -inf once p[blank] rounds to 1. lp is read with its blank set to -inf for the
// duration (float32: the vector max and exp-sum; an exp(-inf) counts as ~1e-38 beside the maximum's 1).
template <typename T>
inline T log_nonblank_mass(T* lp, int64_t n, int64_t blank) {
  const T lpb = lp[blank];
  lp[blank] = neg_inf<T>();
  T mx, sum;
  if constexpr (std::is_same_v<T, float>) {
    mx = max_of(lp, n);
    sum = mx == neg_inf<T>() ? T(0) : sum_exp_shifted(lp, n, mx);
  } else {
    mx = neg_inf<T>();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, lp[i]);
    sum = T(0);
    if (mx != neg_inf<T>())
      for (int64_t i = 0; i < n; ++i) sum += std::exp(lp[i] - mx);
  }
  lp[blank] = lpb;
  return mx == neg_inf<T>() ? mx : mx + std::log(sum);
}

inline std::string invalid_fusion_state(int64_t b, int64_t k) {
  return "fusion state out of range (utterance " + std::to_string(b) + ", slot " + std::to_string(k) + ")";
}

}  // namespace asrd
