// No C++ exception may cross the C ABI (it would abort the Python process): every exported entry
// point runs its body through one of these guards, which turn std::bad_alloc and every other
// exception into a return code (and, where the entry point reports messages, a message).
//
// Return codes, shared by every entry point and by asrdecode/native/_lib.py (check_status):
//   kOutOfMemory   (-2): std::bad_alloc (or std::length_error: a size past what a vector can hold);
//   kInternalError (-3): any other C++ exception;
//   kNonFiniteJoint (-4): NonFiniteJoint, thrown by a transducer search whose joint gave a row with a NaN or
//                         +inf logit or no possible class (check_joint_row): Python's NonFiniteJointError.
// A message is copied without allocating (the guard may run out of memory itself).
#pragma once

#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace asrd {

constexpr int kOutOfMemory = -2;
constexpr int kInternalError = -3;
constexpr int kNonFiniteJoint = -4;

// Thrown where a joint row has a NaN or +inf logit, or every class -inf: the search has no meaning.
struct NonFiniteJoint {};

// Raise NonFiniteJoint unless x [n] holds no NaN and no +inf and some value above -inf (a -inf is a masked
// class: probability 0). Two compares per value (float32: four lanes at a time), beside the log-softmax's
// exp per value.
template <typename T>
inline void check_joint_row(const T* x, int64_t n) {
  constexpr T inf = std::numeric_limits<T>::infinity();
  bool bad = false, any = false;
  int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, float>) {
    const __m128 hi = _mm_set1_ps(inf), lo = _mm_set1_ps(-inf);
    __m128 b = _mm_setzero_ps(), a = _mm_setzero_ps();
    for (; i + 4 <= n; i += 4) {
      const __m128 v = _mm_loadu_ps(x + i);
      b = _mm_or_ps(b, _mm_cmpnlt_ps(v, hi));  // !(v < inf): NaN or +inf
      a = _mm_or_ps(a, _mm_cmpgt_ps(v, lo));
    }
    bad = _mm_movemask_ps(b) != 0;
    any = _mm_movemask_ps(a) != 0;
  }
#endif
  for (; i < n; ++i) {
    bad |= !(x[i] < inf);  // NaN or +inf
    any |= x[i] > -inf;
  }
  if (bad || !any) throw NonFiniteJoint{};
}

// Copy `a` then `b` (either may be null) into err [err_len], truncated and NUL-terminated; no allocation.
inline void copy_message(const char* a, const char* b, char* err, int64_t err_len) noexcept {
  if (!err || err_len <= 0) return;
  size_t at = 0;
  const size_t cap = static_cast<size_t>(err_len - 1);
  for (const char* s : {a, b})
    for (; s && *s && at < cap; ++s) err[at++] = *s;
  err[at] = '\0';
}

// f() -> an integer result; an exception becomes kOutOfMemory or kInternalError.
template <class R, class F>
R guard_code(F&& f) noexcept {
  try {
    return f();
  } catch (const NonFiniteJoint&) {
    return static_cast<R>(kNonFiniteJoint);
  } catch (const std::bad_alloc&) {
    return static_cast<R>(kOutOfMemory);
  } catch (const std::length_error&) {
    return static_cast<R>(kOutOfMemory);
  } catch (...) {
    return static_cast<R>(kInternalError);
  }
}

// f() -> std::string (empty: success): 0, or 1 with the message in err; an exception becomes
// kOutOfMemory / kInternalError with its message.
template <class F>
int guard_message(F&& f, char* err, int64_t err_len) noexcept {
  try {
    const std::string msg = f();
    if (msg.empty()) return 0;
    copy_message(msg.c_str(), nullptr, err, err_len);
    return 1;
  } catch (const NonFiniteJoint&) {  // (no message: _lib.check_status names the error)
    return kNonFiniteJoint;
  } catch (const std::bad_alloc&) {
    copy_message("native engine: out of memory", nullptr, err, err_len);
    return kOutOfMemory;
  } catch (const std::length_error& ex) {
    copy_message("native engine: out of memory: ", ex.what(), err, err_len);
    return kOutOfMemory;
  } catch (const std::exception& ex) {
    copy_message("native engine: ", ex.what(), err, err_len);
    return kInternalError;
  } catch (...) {
    copy_message("native engine: an unknown C++ exception", nullptr, err, err_len);
    return kInternalError;
  }
}

}  // namespace asrd
