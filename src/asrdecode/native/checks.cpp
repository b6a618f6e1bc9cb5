// Input checks on the native engine: the normalisation check of CTC emissions
// (asrdecode.ctc._checks.prepare_log_probs) in one pass over the valid frames, instead of a
// logsumexp, a min, a mask and a host copy in eager PyTorch (a fixed cost that dominated batch 1).
#include <cmath>
#include <cstdint>
#include <limits>

namespace {

// Over the valid frames of x [B, T, V] (frames t < lengths[b]; every frame when lengths is null):
// out[0] = the largest |logsumexp| of a frame, out[1] = the smallest value (NaN when a frame holds
// a NaN, so that the caller's finiteness test fails as torch's does; 0, 0 without a valid frame).
// exp in the emissions' precision, sums in double.
template <typename T>
void check_log_probs(const T* x, int64_t B, int64_t Tn, int64_t V, int64_t stride_b, const int64_t* lengths,
                     double* out) {
  double worst = 0.0, lowest = std::numeric_limits<double>::infinity();
  bool nan = false, any = false;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = lengths ? lengths[b] : Tn;
    for (int64_t t = 0; t < len; ++t) {
      const T* f = x + b * stride_b + t * V;
      any = true;
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t v = 0; v < V; ++v) {
        const double e = static_cast<double>(f[v]);
        if (std::isnan(e)) nan = true;
        if (e > m) m = e;
        if (e < lowest) lowest = e;
      }
      double lse;
      if (std::isinf(m)) {
        lse = m;  // all -inf (-inf) or a +inf (inf): both fail the caller's test
      } else {
        double s = 0.0;
        const T mt = static_cast<T>(m);  // m is one of the frame's values: exact in T
        for (int64_t v = 0; v < V; ++v) s += static_cast<double>(std::exp(f[v] - mt));
        lse = m + std::log(s);
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
