// Input checks on the native engine: the normalisation check of CTC emissions
// (asrdecode.ctc._checks.prepare_log_probs) in one pass over the valid frames, instead of a
// logsumexp, a min, a mask and a host copy in eager PyTorch (a fixed cost that dominated batch 1).
#include <cmath>
#include <cstdint>
#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstring>
#include <limits>
#include <vector>

namespace {

// Over the valid frames of x [B, T, V] (frames t < lengths[b]; every frame when lengths is null):
// out[0] = the largest |logsumexp| of a frame, out[1] = the smallest value (NaN when a frame holds
// a NaN, so that the caller's finiteness test fails as torch's does; 0, 0 without a valid frame).
// exp in the emissions' precision, sums in double.
// sum of x [V] in double (four partial sums).
inline double sum_as_double(const float* x, int64_t V) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int64_t v = 0;
  for (; v + 4 <= V; v += 4)
    for (int i = 0; i < 4; ++i) s[i] += static_cast<double>(x[v + i]);
  for (; v < V; ++v) s[0] += static_cast<double>(x[v]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// sum_v exp(f[v] - m) in double. float32: exp by a vectorisable polynomial (Cephes' expf: range
// reduction to [-ln2/2, ln2/2], degree-7 polynomial, relative error ~2e-7, arguments below -87 clamped
// there: terms < 2e-38 that a float32 exp would flush anyway), written to `buf` then summed; the check
// compares the result with a 1e-3 tolerance, so this error is immaterial. float64: std::exp.
inline double sum_exp(const double* f, int64_t V, double m, std::vector<float>&) {
  double s = 0.0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(f[v] - m);
  return s;
}

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-trapping-math")))  // lets GCC vectorise the clamp (no FP exceptions are read)
#endif
inline double sum_exp(const float* f, int64_t V, float m, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(V));
  float* out = buf.data();
  for (int64_t v = 0; v < V; ++v) {
    float x = f[v] - m;
    x = x < -87.0f ? -87.0f : x;  // (also maps -inf; NaN is caught by the caller's pass)
    const float fx = x * 1.44269504088896341f;
    const int32_t n = static_cast<int32_t>(fx - 0.5f);  // x <= 0: round to nearest (ties away)
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
    out[v] = p * scale;
  }
  return sum_as_double(out, V);
}

// Largest and smallest value of f [V] (meaningless when it holds a NaN); returns whether it does.
#if defined(__SSE2__)
inline bool frame_extremes(const float* f, int64_t V, float* mx, float* mn) {
  __m128 hi = _mm_set1_ps(-std::numeric_limits<float>::infinity());
  __m128 lo = _mm_set1_ps(std::numeric_limits<float>::infinity());
  __m128 bad = _mm_setzero_ps();
  int64_t v = 0;
  for (; v + 4 <= V; v += 4) {
    const __m128 x = _mm_loadu_ps(f + v);
    hi = _mm_max_ps(hi, x);
    lo = _mm_min_ps(lo, x);
    bad = _mm_or_ps(bad, _mm_cmpunord_ps(x, x));
  }
  alignas(16) float h[4], l[4];
  _mm_store_ps(h, hi);
  _mm_store_ps(l, lo);
  bool nan = _mm_movemask_ps(bad) != 0;
  float a = std::max(std::max(h[0], h[1]), std::max(h[2], h[3]));
  float b = std::min(std::min(l[0], l[1]), std::min(l[2], l[3]));
  for (; v < V; ++v) {
    const float x = f[v];
    if (x != x) nan = true;
    if (x > a) a = x;
    if (x < b) b = x;
  }
  *mx = a;
  *mn = b;
  return nan;
}
#endif

template <typename T>
inline bool frame_extremes(const T* f, int64_t V, T* mx, T* mn) {
  constexpr int L = 8;
  T a[L], b[L];
  int bad[L];
  for (int i = 0; i < L; ++i) { a[i] = -std::numeric_limits<T>::infinity(); b[i] = -a[i]; bad[i] = 0; }
  int64_t v = 0;
  for (; v + L <= V; v += L)
    for (int i = 0; i < L; ++i) {
      const T x = f[v + i];
      a[i] = x > a[i] ? x : a[i];
      b[i] = x < b[i] ? x : b[i];
      bad[i] |= x != x;
    }
  for (int i = 0; v < V; ++v, ++i) {
    const T x = f[v];
    a[i] = x > a[i] ? x : a[i];
    b[i] = x < b[i] ? x : b[i];
    bad[i] |= x != x;
  }
  T hi = a[0], lo = b[0];
  int nan = bad[0];
  for (int i = 1; i < L; ++i) {
    hi = a[i] > hi ? a[i] : hi;
    lo = b[i] < lo ? b[i] : lo;
    nan |= bad[i];
  }
  *mx = hi;
  *mn = lo;
  return nan != 0;
}

template <typename T>
void check_log_probs(const T* x, int64_t B, int64_t Tn, int64_t V, int64_t stride_b, const int64_t* lengths,
                     double* out) {
  double worst = 0.0, lowest = std::numeric_limits<double>::infinity();
  bool nan = false, any = false;
  std::vector<float> buf;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lengths ? lengths[b] : Tn;
    for (int64_t t = 0; t < len; ++t) {
      const T* f = x + b * stride_b + t * V;
      any = true;
      T mx, mn;
      if (frame_extremes(f, V, &mx, &mn)) nan = true;
      const double m = static_cast<double>(mx);
      if (static_cast<double>(mn) < lowest) lowest = static_cast<double>(mn);
      double lse;
      if (std::isinf(m)) {
        lse = m;  // all -inf (-inf) or a +inf (inf): both fail the caller's test
      } else {
        const T mt = static_cast<T>(m);  // m is one of the frame's values: exact in T
        lse = m + std::log(sum_exp(f, V, mt, buf));
      }
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
                          const int64_t* lengths, double* out) {
  if (is_double)
    check_log_probs(static_cast<const double*>(x), B, T, V, stride_b, lengths, out);
  else
    check_log_probs(static_cast<const float*>(x), B, T, V, stride_b, lengths, out);
}

}  // extern "C"
