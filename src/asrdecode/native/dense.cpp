// Dense kernels of dense.h. Built without -march=native (runs on any x86-64): each kernel has a
// portable version and an AVX2 + FMA one (explicit intrinsics, compiled with a per-function target
// attribute), the product also an AVX-512 one, picked once at run time by what the CPU has (level()).
// Within one machine a row's result never depends on the batch: every output element is one fixed
// chain of operations over its own inputs (the product: one 8- or 16-lane FMA accumulator per dot
// product, the K tail as zero-filled lanes, one fixed horizontal sum; the tiles only choose which
// chains run side by side), so batched and one-utterance calls agree bit for bit.
#include "dense.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ASRD_X86 1
#else
#define ASRD_X86 0
#endif

namespace asrd {

namespace {

// ------------------------------------------------------------------------------------------ portable
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

void matmat_portable(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
    for (int n = 0; n < N; ++n) {
        const float* w = W + static_cast<int64_t>(n) * K;
        for (int a = 0; a < A; ++a) {
            const float* x = X + static_cast<int64_t>(a) * K;
            float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
            int k = 0;
            for (; k + 8 <= K; k += 8)
                for (int j = 0; j < 8; ++j) acc[j] += w[k + j] * x[k + j];
            float tail = 0.f;
            for (; k < K; ++k) tail += w[k] * x[k];
            Y[static_cast<int64_t>(a) * N + n] = (b ? b[n] : 0.f) +
                ((((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail);
        }
    }
}

void joint_hidden_portable(const float* e, const float* g, int H, int act, float* z) {
    for (int k = 0; k < H; ++k) {
        const float s = e[k] + g[k];
        z[k] = act == 0 ? std::tanh(s) : (s > 0.f ? s : 0.f);
    }
}

void lstm_cell_portable(const float* gates, int P, float* c, float* h) {
    for (int p = 0; p < P; ++p) {
        const float i = sigmoid(gates[p]), f = sigmoid(gates[P + p]);
        const float gg = std::tanh(gates[2 * P + p]), o = sigmoid(gates[3 * P + p]);
        c[p] = f * c[p] + i * gg;
        h[p] = o * std::tanh(c[p]);
    }
}

int argmax_portable(const float* x, int n) {
    int y = 0;
    for (int v = 1; v < n; ++v) if (x[v] > x[y]) y = v;
    return y;
}

double log_sum_exp_portable(const float* x, int n, float mx) {
    double s = 0.0;
    for (int v = 0; v < n; ++v) s += std::exp(static_cast<double>(x[v] - mx));
    return std::log(s);
}

void log_softmax_portable(const float* x, int n, float* out) {
    float mx = x[0];
    for (int v = 1; v < n; ++v) mx = x[v] > mx ? x[v] : mx;
    const float lse = static_cast<float>(log_sum_exp_portable(x, n, mx));
    for (int v = 0; v < n; ++v) out[v] = (x[v] - mx) - lse;
}

#if ASRD_X86
// ------------------------------------------------------------------------------------------ AVX2 + FMA
#define ASRD_AVX2 __attribute__((target("avx2,fma")))

// lanes [0, r) set (r in 1..8): the loads of a tail
ASRD_AVX2 inline __m256i tail_mask(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7))
ASRD_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// The dot products of RW rows of W with RX rows of X (row strides K), one accumulator each:
// out[j * ldy + i] = bias[i] + W_i . X_j (i < RW, j < RX).
template <int RW, int RX>
ASRD_AVX2 inline void tile(const float* w, const float* x, int K, const float* bias, float* out, int64_t ldy) {
    __m256 acc[RW][RX];
    for (int i = 0; i < RW; ++i)
        for (int j = 0; j < RX; ++j) acc[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[RX];
        for (int j = 0; j < RX; ++j) xv[j] = _mm256_loadu_ps(x + static_cast<int64_t>(j) * K + k);
        for (int i = 0; i < RW; ++i) {
            __m256 wv = _mm256_loadu_ps(w + static_cast<int64_t>(i) * K + k);
            __asm__("" : "+x"(wv));  // one load per W vector (not one per FMA: the loads would bound the loop)
            for (int j = 0; j < RX; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    if (k < K) {  // the tail as zero-filled lanes: the same chain as a K padded to a multiple of 8
        const __m256i m = tail_mask(K - k);
        __m256 xv[RX];
        for (int j = 0; j < RX; ++j) xv[j] = _mm256_maskload_ps(x + static_cast<int64_t>(j) * K + k, m);
        for (int i = 0; i < RW; ++i) {
            const __m256 wv = _mm256_maskload_ps(w + static_cast<int64_t>(i) * K + k, m);
            for (int j = 0; j < RX; ++j) acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < RW; ++i)
        for (int j = 0; j < RX; ++j) out[j * ldy + i] = (bias ? bias[i] : 0.f) + hsum(acc[i][j]);
}

// Rows [n0, n1) of W against RX rows of X: RW W rows at a time (RW x RX accumulators, at most 12:
// enough independent chains to hide the FMA latency, few enough for the 16 registers), then one at a time.
template <int RX>
ASRD_AVX2 void tile_cols(const float* W, const float* b, const float* x, int n0, int n1, int K, float* y, int64_t ldy) {
    constexpr int RW = RX == 1 ? 8 : RX == 2 ? 6 : 4;
    int n = n0;
    for (; n + RW <= n1; n += RW)
        tile<RW, RX>(W + static_cast<int64_t>(n) * K, x, K, b ? b + n : nullptr, y + n, ldy);
    for (; n < n1; ++n) tile<1, RX>(W + static_cast<int64_t>(n) * K, x, K, b ? b + n : nullptr, y + n, ldy);
}

ASRD_AVX2 void matmat_avx2(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
    constexpr int kChunk = 12;  // X rows per pass over W (24 KB at K = 512: stays in L1 with a W tile)
    constexpr int kWBlock = 48;  // W rows per pass over a chunk's X rows
    for (int a0 = 0; a0 < A; a0 += kChunk) {
        const int a1 = a0 + kChunk < A ? a0 + kChunk : A;
        for (int n0 = 0; n0 < N; n0 += kWBlock) {
            const int n1 = n0 + kWBlock < N ? n0 + kWBlock : N;
            for (int a = a0; a < a1;) {  // X rows 3 at a time; a rest of 4 as 2 + 2, not 3 + 1
                const int left = a1 - a, rx = left == 4 || left == 2 ? 2 : left == 1 ? 1 : 3;
                const float* x = X + static_cast<int64_t>(a) * K;
                float* y = Y + static_cast<int64_t>(a) * N;
                if (rx == 3) tile_cols<3>(W, b, x, n0, n1, K, y, N);
                else if (rx == 2) tile_cols<2>(W, b, x, n0, n1, K, y, N);
                else tile_cols<1>(W, b, x, n0, n1, K, y, N);
                a += rx;
            }
        }
    }
}

// ------------------------------------------------------------------------------------------ AVX-512
// The product only (the elementwise kernels stay AVX2): 16-lane accumulators, up to 24 of the 32 registers.
#define ASRD_AVX512 __attribute__((target("avx512f")))

// hsum of the 8 lane pairs (v_i + v_{i+8})
ASRD_AVX512 inline float hsum16(__m512 v) {
    const __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    __m128 s = _mm_add_ps(_mm512_castps512_ps128(t), _mm512_extractf32x4_ps(t, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// acc[i][j] += W_i[k : k + 16] * X_j[k : k + 16], the lanes outside m zero
template <int RW, int RX, bool kTail>
ASRD_AVX512 inline void step16(const float* w, const float* x, int K, int k, __mmask16 m, __m512 (&acc)[RW][RX]) {
    __m512 xv[RX];
    for (int j = 0; j < RX; ++j)
        xv[j] = kTail ? _mm512_maskz_loadu_ps(m, x + static_cast<int64_t>(j) * K + k)
                      : _mm512_loadu_ps(x + static_cast<int64_t>(j) * K + k);
    for (int i = 0; i < RW; ++i) {
        __m512 wv = kTail ? _mm512_maskz_loadu_ps(m, w + static_cast<int64_t>(i) * K + k)
                          : _mm512_loadu_ps(w + static_cast<int64_t>(i) * K + k);
        __asm__("" : "+v"(wv));  // one load per W vector
        for (int j = 0; j < RX; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
}

// tile() with 16 lanes: out[j * ldy + i] = bias[i] + W_i . X_j, the K tail as zero-filled lanes
template <int RW, int RX>
ASRD_AVX512 inline void tile16(const float* w, const float* x, int K, const float* bias, float* out, int64_t ldy) {
    __m512 acc[RW][RX];
    for (int i = 0; i < RW; ++i)
        for (int j = 0; j < RX; ++j) acc[i][j] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) step16<RW, RX, false>(w, x, K, k, __mmask16(0xFFFF), acc);
    if (k < K) step16<RW, RX, true>(w, x, K, k, __mmask16((1u << (K - k)) - 1u), acc);
    for (int i = 0; i < RW; ++i)
        for (int j = 0; j < RX; ++j) out[j * ldy + i] = (bias ? bias[i] : 0.f) + hsum16(acc[i][j]);
}

template <int RX>
ASRD_AVX512 void tile16_cols(const float* W, const float* b, const float* x, int n0, int n1, int K, float* y, int64_t ldy) {
    constexpr int RW = RX == 1 ? 16 : RX == 2 ? 8 : RX == 3 ? 8 : RX == 4 ? 6 : 4;
    int n = n0;
    for (; n + RW <= n1; n += RW)
        tile16<RW, RX>(W + static_cast<int64_t>(n) * K, x, K, b ? b + n : nullptr, y + n, ldy);
    for (; n < n1; ++n) tile16<1, RX>(W + static_cast<int64_t>(n) * K, x, K, b ? b + n : nullptr, y + n, ldy);
}

ASRD_AVX512 void matmat_avx512(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
    constexpr int kChunk = 12;
    constexpr int kWBlock = 48;
    for (int a0 = 0; a0 < A; a0 += kChunk) {
        const int a1 = a0 + kChunk < A ? a0 + kChunk : A;
        for (int n0 = 0; n0 < N; n0 += kWBlock) {
            const int n1 = n0 + kWBlock < N ? n0 + kWBlock : N;
            for (int a = a0; a < a1;) {  // X rows 6 at a time; a rest of 7..11 as two near halves
                const int left = a1 - a, rx = left <= 6 ? left : left >= 12 ? 6 : (left + 1) / 2;
                const float* x = X + static_cast<int64_t>(a) * K;
                float* y = Y + static_cast<int64_t>(a) * N;
                switch (rx) {
                    case 1: tile16_cols<1>(W, b, x, n0, n1, K, y, N); break;
                    case 2: tile16_cols<2>(W, b, x, n0, n1, K, y, N); break;
                    case 3: tile16_cols<3>(W, b, x, n0, n1, K, y, N); break;
                    case 4: tile16_cols<4>(W, b, x, n0, n1, K, y, N); break;
                    case 5: tile16_cols<5>(W, b, x, n0, n1, K, y, N); break;
                    default: tile16_cols<6>(W, b, x, n0, n1, K, y, N); break;
                }
                a += rx;
            }
        }
    }
}

// exp(x), Cephes' single-precision polynomial (about 1 ulp) for x in [-87.3, 88] (2^n stays a normal
// float), x clamped to 88 above; 0 below -87.3 (where exp(x) < FLT_MIN).
ASRD_AVX2 inline __m256 exp8(__m256 x0) {
    // clamps with x second: min / max return their second operand on NaN, so a NaN stays NaN
    __m256 x = _mm256_min_ps(_mm256_set1_ps(88.f), _mm256_max_ps(_mm256_set1_ps(-87.3f), x0));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    const __m256 under = _mm256_cmp_ps(x0, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

// tanh(x): a 13/6 rational approximation on [-7.9, 7.9] (Eigen's float tanh; a few ulp), x itself
// where |x| < 4e-4, +-1 beyond.
ASRD_AVX2 inline __m256 tanh8(__m256 a) {
    const __m256 x = _mm256_min_ps(_mm256_set1_ps(7.90531110763549805f),  // a NaN stays NaN (see exp8)
                                   _mm256_max_ps(_mm256_set1_ps(-7.90531110763549805f), a));
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-2.76076847742355e-16f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.00018790482477e-13f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-8.60467152213735e-11f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(5.12229709037114e-08f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.48572235717979e-05f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(6.37261928875436e-04f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(4.89352455891786e-03f));
    p = _mm256_mul_ps(p, x);
    __m256 q = _mm256_set1_ps(1.19825839466702e-06f);
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(1.18534705686654e-04f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(2.26843463243900e-03f));
    q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(4.89352518554385e-03f));
    const __m256 r = _mm256_div_ps(p, q);
    const __m256 tiny = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), a), _mm256_set1_ps(4e-4f), _CMP_LT_OQ);
    return _mm256_blendv_ps(r, a, tiny);
}

ASRD_AVX2 inline __m256 sigmoid8(__m256 x) {
    const __m256 one = _mm256_set1_ps(1.f);
    return _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// Elementwise kernels go 8 lanes at a time; the last m < 8 through masked loads / stores (the same
// lanes' math).
ASRD_AVX2 inline __m256 load(const float* p, int m) {
    return m == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(m));
}

ASRD_AVX2 inline void store(float* p, __m256 v, int m) {
    if (m == 8) _mm256_storeu_ps(p, v);
    else _mm256_maskstore_ps(p, tail_mask(m), v);
}

inline int lanes(int n, int k) { return n - k < 8 ? n - k : 8; }

ASRD_AVX2 void joint_hidden_avx2(const float* e, const float* g, int H, int act, float* z) {
    for (int k = 0; k < H; k += 8) {
        const int m = lanes(H, k);
        const __m256 s = _mm256_add_ps(load(e + k, m), load(g + k, m));
        store(z + k, act == 0 ? tanh8(s) : _mm256_max_ps(s, _mm256_setzero_ps()), m);
    }
}

ASRD_AVX2 void lstm_cell_avx2(const float* gates, int P, float* c, float* h) {
    for (int p = 0; p < P; p += 8) {
        const int m = lanes(P, p);
        const __m256 i = sigmoid8(load(gates + p, m)), f = sigmoid8(load(gates + P + p, m));
        const __m256 gg = tanh8(load(gates + 2 * P + p, m)), o = sigmoid8(load(gates + 3 * P + p, m));
        const __m256 cn = _mm256_fmadd_ps(f, load(c + p, m), _mm256_mul_ps(i, gg));
        store(c + p, cn, m);
        store(h + p, _mm256_mul_ps(o, tanh8(cn)), m);
    }
}

// the largest of x [n], NaNs skipped (-inf where all are NaN)
ASRD_AVX2 float max_avx2(const float* x, int n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 mv = ninf;
    for (int k = 0; k < n; k += 8) {
        const int m = lanes(n, k);
        const __m256 v = m == 8 ? _mm256_loadu_ps(x + k)
                                : _mm256_blendv_ps(ninf, load(x + k, m), _mm256_castsi256_ps(tail_mask(m)));
        mv = _mm256_max_ps(v, mv);  // a NaN v keeps mv
    }
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_shuffle_ps(s, s, 1)));
}

// first index of the maximum, NaNs skipped as the scalar rule skips them (none can be greater)
ASRD_AVX2 int argmax_avx2(const float* x, int n) {
    const float mx = max_avx2(x, n);
    if (std::isnan(x[0])) return 0;  // the scalar rule: nothing compares greater than a NaN
    for (int v = 0; v < n; ++v) if (x[v] == mx) return v;
    return 0;
}

// log(sum_v exp(x[v] - mx)): the terms and their sum in float lanes, the log in double
ASRD_AVX2 double log_sum_exp_avx2(const float* x, int n, float mx) {
    const __m256 m8 = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    for (int k = 0; k < n; k += 8) {
        const int m = lanes(n, k);
        const __m256 e = exp8(_mm256_sub_ps(load(x + k, m), m8));
        acc = _mm256_add_ps(acc, m == 8 ? e : _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(m))));
    }
    return std::log(static_cast<double>(hsum(acc)));
}

// (x - max) - log(sum exp(x - max)) in float lanes
ASRD_AVX2 void log_softmax_avx2(const float* x, int n, float* out) {
    const float mx = max_avx2(x, n);
    const __m256 shift = _mm256_set1_ps(mx), lse = _mm256_set1_ps(static_cast<float>(log_sum_exp_avx2(x, n, mx)));
    for (int k = 0; k < n; k += 8) {
        const int m = lanes(n, k);
        store(out + k, _mm256_sub_ps(_mm256_sub_ps(load(x + k, m), shift), lse), m);
    }
}

// The kernels this CPU has: 2 AVX-512 product + AVX2 elementwise, 1 AVX2 + FMA, 0 portable.
int cpu_level() {
    // __builtin_cpu_init first: this may run before libgcc's own initialiser does
    static const int have = (__builtin_cpu_init(), !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")))
                                ? 0 : __builtin_cpu_supports("avx512f") ? 2 : 1;
    return have;
}

// The kernels in use: the best the CPU has, at most what ASRDECODE_NATIVE_KERNELS names (portable,
// avx2: how the tests run every path in a search).
int level() {
    static const int got = [] {
        const char* cap = std::getenv("ASRDECODE_NATIVE_KERNELS");
        const std::string c = cap ? cap : "";
        const int most = c == "portable" ? 0 : c == "avx2" ? 1 : 2;
        return cpu_level() < most ? cpu_level() : most;
    }();
    return got;
}
#else
int cpu_level() { return 0; }
int level() { return 0; }
#endif

}  // namespace

// ------------------------------------------------------------------------------------------ dispatch
#if ASRD_X86
#define ASRD_PICK(name, ...) (level() >= 1 ? name##_avx2(__VA_ARGS__) : name##_portable(__VA_ARGS__))
#else
#define ASRD_PICK(name, ...) name##_portable(__VA_ARGS__)
#endif

namespace {

// matmat on the kernels of level `at` (at most cpu_level())
void matmat_at(int at, const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
#if ASRD_X86
    if (at == 2) return matmat_avx512(W, b, X, A, N, K, Y);
    if (at == 1) return matmat_avx2(W, b, X, A, N, K, Y);
#endif
    (void)at;
    matmat_portable(W, b, X, A, N, K, Y);
}

void log_softmax_at(int at, const float* x, int n, float* out) {
#if ASRD_X86
    if (at >= 1) return log_softmax_avx2(x, n, out);
#endif
    (void)at;
    log_softmax_portable(x, n, out);
}

}  // namespace

void matmat(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
    matmat_at(level(), W, b, X, A, N, K, Y);
}

double product_cost(int rows) {
    // measured at N x K 500 x 512 to 2560 x 640 (AMD EPYC, Zen 5): 1..12 rows, in units of one row at the
    // product's peak rate (the portable product has no such gain: linear)
    static const double kAvx512[] = {4.0, 4.0, 4.3, 4.8, 5.5, 6.0, 8.5, 9.2, 9.8, 10.9, 11.4, 12.0};
    static const double kAvx2[] = {2.2, 2.5, 3.0, 5.0, 5.5, 6.1, 7.8, 8.4, 9.0, 10.6, 11.3, 12.0};
    if (rows < 1) return 0.0;
    if (rows > 12 || level() == 0) return rows;
    return level() == 2 ? kAvx512[rows - 1] : kAvx2[rows - 1];
}

void joint_hidden(const float* e, const float* g, int H, int act, float* z) { ASRD_PICK(joint_hidden, e, g, H, act, z); }

void lstm_cell(const float* gates, int P, float* c, float* h) { ASRD_PICK(lstm_cell, gates, P, c, h); }

int argmax_first(const float* x, int n) { return ASRD_PICK(argmax, x, n); }

double log_sum_exp(const float* x, int n, float mx) { return ASRD_PICK(log_sum_exp, x, n, mx); }

void fast_log_softmax(const float* x, int n, float* out) { log_softmax_at(level(), x, n, out); }

// icefall's stateless decoder before its projection: x_k = emb[y_k] (zeros for y_k < 0), grouped conv
// over the C context positions, relu -> mid [E].
void stateless_mid(const int* ctx, int C, const float* emb, int E, const float* convw, const float* convb, int G,
                   std::vector<float>& x, float* mid) {
    for (int k = 0; k < C; ++k) {
        float* xk = x.data() + static_cast<int64_t>(k) * E;
        if (ctx[k] < 0) std::memset(xk, 0, sizeof(float) * E);
        else std::memcpy(xk, emb + static_cast<int64_t>(ctx[k]) * E, sizeof(float) * E);
    }
    const int per = E / G;  // channels per group (in = out)
    for (int c0 = 0; c0 < E; c0 += 8) {  // 8 channels at a time: independent sums, each in the order i, k
        const int n = E - c0 < 8 ? E - c0 : 8;
        float s[8];
        const float* w[8];   // [per, C] of each channel (convw [E, per, C])
        const float* xg[8];  // its group's first input channel at context position 0 (x [C, E])
        for (int j = 0; j < n; ++j) {
            s[j] = convb ? convb[c0 + j] : 0.f;
            w[j] = convw + static_cast<int64_t>(c0 + j) * per * C;
            xg[j] = x.data() + ((c0 + j) / per) * per;
        }
        for (int i = 0; i < per; ++i)
            for (int k = 0; k < C; ++k)
                for (int j = 0; j < n; ++j) s[j] += w[j][i * C + k] * xg[j][static_cast<int64_t>(k) * E + i];
        for (int j = 0; j < n; ++j) mid[c0 + j] = s[j] > 0.f ? s[j] : 0.f;
    }
}

// LSTM step for rows `rows` (labels `labels`); h, c [B, L, P]; g [B, H].
void predict_rows(const Net& n, const std::vector<int>& rows, const std::vector<int>& labels, float* h, float* c,
                  float* g, std::vector<float>& X, std::vector<float>& Gt, std::vector<float>& Hg) {
    const int P = n.P, G4 = 4 * P, A = static_cast<int>(rows.size()), L = n.L;
    if (A == 0) return;
    for (int l = 0; l < L; ++l) {
        if (l == 0) {
            X.resize(static_cast<size_t>(A) * P);
            for (int a = 0; a < A; ++a)
                std::memcpy(&X[static_cast<size_t>(a) * P], h + (static_cast<int64_t>(rows[a]) * L) * P, sizeof(float) * P);
            Gt.resize(static_cast<size_t>(A) * G4);
            matmat(n.whh0, nullptr, X.data(), A, G4, P, Gt.data());
            for (int a = 0; a < A; ++a) {  // + the label's table row (the bias of this product)
                const float* row = n.table + static_cast<int64_t>(labels[a]) * G4;
                for (int q = 0; q < G4; ++q) Gt[static_cast<size_t>(a) * G4 + q] += row[q];
            }
        } else {
            X.resize(static_cast<size_t>(A) * 2 * P);
            for (int a = 0; a < A; ++a) {
                const float* hb = h + (static_cast<int64_t>(rows[a]) * L) * P;
                std::memcpy(&X[static_cast<size_t>(a) * 2 * P], hb + static_cast<int64_t>(l - 1) * P, sizeof(float) * P);
                std::memcpy(&X[static_cast<size_t>(a) * 2 * P + P], hb + static_cast<int64_t>(l) * P, sizeof(float) * P);
            }
            Gt.resize(static_cast<size_t>(A) * G4);
            matmat(n.wup + static_cast<int64_t>(l - 1) * G4 * 2 * P, n.bup + static_cast<int64_t>(l - 1) * G4, X.data(),
                   A, G4, 2 * P, Gt.data());
        }
        for (int a = 0; a < A; ++a)
            lstm_cell(&Gt[static_cast<size_t>(a) * G4], P, c + (static_cast<int64_t>(rows[a]) * L + l) * P,
                      h + (static_cast<int64_t>(rows[a]) * L + l) * P);
    }
    X.resize(static_cast<size_t>(A) * P);
    for (int a = 0; a < A; ++a)
        std::memcpy(&X[static_cast<size_t>(a) * P], h + (static_cast<int64_t>(rows[a]) * L + L - 1) * P, sizeof(float) * P);
    Hg.resize(static_cast<size_t>(A) * n.H);
    matmat(n.wdec, n.bdec, X.data(), A, n.H, P, Hg.data());
    for (int a = 0; a < A; ++a)
        std::memcpy(g + static_cast<int64_t>(rows[a]) * n.H, &Hg[static_cast<size_t>(a) * n.H], sizeof(float) * n.H);
}

}  // namespace asrd

extern "C" {

// asrd::matmat for the Python bindings (the joint's encoder projection of the greedy's frames):
// Y [A, N] = b [N] + X [A, K] W [N, K]^T, each row computed as in the searches.
void asrd_dense_matmat(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) noexcept {
    asrd::matmat(W, b, X, A, N, K, Y);
}

// The kernels of one level (0 portable, 1 AVX2 + FMA, 2 AVX-512 product), whatever the cap, for the
// tests: asrd::matmat (Y as above) and asrd::fast_log_softmax (out [n] of x [n]). -1 where this CPU lacks it.
int asrd_dense_matmat_on(int level, const float* W, const float* b, const float* X, int A, int N, int K, float* Y) noexcept {
    if (level < 0 || level > asrd::cpu_level()) return -1;
    asrd::matmat_at(level, W, b, X, A, N, K, Y);
    return 0;
}

int asrd_dense_log_softmax_on(int level, const float* x, int n, float* out) noexcept {
    if (level < 0 || level > asrd::cpu_level() || n < 1) return -1;
    asrd::log_softmax_at(level, x, n, out);
    return 0;
}

}  // extern "C"
