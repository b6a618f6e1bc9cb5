// Input checks on the native engine: the normalisation check of CTC emissions
// (asrdecode.ctc._checks.prepare_log_probs) over the valid frames, instead of a logsumexp, a min,
// a mask and a host copy in eager PyTorch (a fixed cost that dominated batch 1).
//
// float32 frames take one SSE2 pass (x86-64) that gathers the frame's max, min, NaN flag and
// sum_v exp(x_v) (exp by a polynomial, relative error ~2e-7, summed in double); when the max is
// not within [-20, 20] (not a log-probability frame, or a +-inf) the sum is redone with the max
// subtracted. The result feeds a 1e-3 tolerance test, so these errors are immaterial.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#include "engine.h"

namespace {


// One pass over a float32 frame f [V]: its max, min, whether it holds a NaN, and sum_v exp(f[v] - shift).
inline bool frame_pass(const float* f, int64_t V, float shift, float* mx, float* mn, double* sum) {
  float a = -std::numeric_limits<float>::infinity(), b = std::numeric_limits<float>::infinity();
  bool nan = false;
  double s = 0.0;
  int64_t v = 0;
#if defined(__SSE2__)
  __m128 hi = _mm_set1_ps(a), lo = _mm_set1_ps(b), bad = _mm_setzero_ps();
  __m128d s0 = _mm_setzero_pd(), s1 = _mm_setzero_pd();
  const __m128 sh = _mm_set1_ps(shift);
  for (; v + 4 <= V; v += 4) {
    const __m128 x = _mm_loadu_ps(f + v);
    hi = _mm_max_ps(hi, x);
    lo = _mm_min_ps(lo, x);
    bad = _mm_or_ps(bad, _mm_cmpunord_ps(x, x));
    const __m128 e = asrd::exp_poly4(_mm_sub_ps(x, sh));
    s0 = _mm_add_pd(s0, _mm_cvtps_pd(e));
    s1 = _mm_add_pd(s1, _mm_cvtps_pd(_mm_movehl_ps(e, e)));
  }
  alignas(16) float h[4], l[4];
  alignas(16) double d[2];
  _mm_store_ps(h, hi);
  _mm_store_ps(l, lo);
  _mm_store_pd(d, _mm_add_pd(s0, s1));
  nan = _mm_movemask_ps(bad) != 0;
  a = std::max(std::max(h[0], h[1]), std::max(h[2], h[3]));
  b = std::min(std::min(l[0], l[1]), std::min(l[2], l[3]));
  s = d[0] + d[1];
#endif
  for (; v < V; ++v) {
    const float x = f[v];
    if (x != x) nan = true;
    if (x > a) a = x;
    if (x < b) b = x;
    s += static_cast<double>(asrd::exp_poly(x - shift));
  }
  *mx = a;
  *mn = b;
  *sum = s;
  return nan;
}

// log sum_v exp(f[v]) of a frame, its min, and whether it holds a NaN (float32 / float64 below).
inline bool frame_lse(const float* f, int64_t V, double* lse, double* low) {
  float mx, mn;
  double s;
  const bool nan = frame_pass(f, V, 0.0f, &mx, &mn, &s);
  *low = mn;
  if (std::isinf(mx)) {
    *lse = mx;  // all -inf (-inf) or a +inf (inf): both fail the caller's test
  } else if (mx >= -20.0f && mx <= 20.0f) {
    *lse = std::log(s);
  } else {  // far from a log-probability frame: the sum again, shifted by the max (exact in float)
    float a, b;
    frame_pass(f, V, mx, &a, &b, &s);
    *lse = static_cast<double>(mx) + std::log(s);
  }
  return nan;
}

inline bool frame_lse(const double* f, int64_t V, double* lse, double* low) {
  double m = -std::numeric_limits<double>::infinity(), lo = std::numeric_limits<double>::infinity();
  bool nan = false;
  for (int64_t v = 0; v < V; ++v) {
    const double e = f[v];
    if (std::isnan(e)) nan = true;
    if (e > m) m = e;
    if (e < lo) lo = e;
  }
  *low = lo;
  if (std::isinf(m)) {
    *lse = m;
  } else {
    double s = 0.0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(f[v] - m);
    *lse = m + std::log(s);
  }
  return nan;
}

// Over the valid frames of x [B, T, V] (frames t < lengths[b]; every frame when lengths is null):
// out[0] = the largest |logsumexp| of a frame, out[1] = the smallest value (NaN when a frame holds
// a NaN, so that the caller's finiteness test fails as torch's does; 0, 0 without a valid frame).
template <typename T>
void check_log_probs(const T* x, int64_t B, int64_t Tn, int64_t V, int64_t stride_b, const int64_t* lengths,
                     double* out) {
  double worst = 0.0, lowest = std::numeric_limits<double>::infinity();
  bool nan = false, any = false;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lengths ? std::min(std::max<int64_t>(lengths[b], 0), Tn) : Tn;  // never past x
    for (int64_t t = 0; t < len; ++t) {
      any = true;
      double lse, low;
      if (frame_lse(x + b * stride_b + t * V, V, &lse, &low)) nan = true;
      if (low < lowest) lowest = low;
      const double a = std::fabs(lse);
      if (!(a <= worst)) worst = a;
    }
  }
  if (nan) worst = std::numeric_limits<double>::quiet_NaN();
  out[0] = worst;
  out[1] = any ? lowest : 0.0;  // no valid frame: nothing to reject
}

}  // namespace

extern "C" {

// See check_log_probs; x holds float32 (is_double 0) or float64 values, frames contiguous.
void asrd_check_log_probs(const void* x, int64_t is_double, int64_t B, int64_t T, int64_t V, int64_t stride_b,
                          const int64_t* lengths, double* out) noexcept {
  if (is_double)
    check_log_probs(static_cast<const double*>(x), B, T, V, stride_b, lengths, out);
  else
    check_log_probs(static_cast<const float*>(x), B, T, V, stride_b, lengths, out);
}

}  // extern "C"
