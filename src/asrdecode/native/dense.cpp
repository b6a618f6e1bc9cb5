// Dense kernels of dense.h. Built without -march=native (runs on any x86-64); the product picks an
// AVX2 clone at load time where the CPU has it. No FMA contraction (-ffp-contract=off): the same
// float operations for a row whatever the batch, so batched and one-utterance calls agree.
#include "dense.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace asrd {

namespace {

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

}  // namespace

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
    for (int c = 0; c < E; ++c) {
        const int base = (c / per) * per;
        const float* w = convw + static_cast<int64_t>(c) * per * C;  // [E, per, C]
        float s = convb ? convb[c] : 0.f;
        for (int i = 0; i < per; ++i)
            for (int k = 0; k < C; ++k) s += w[i * C + k] * x[static_cast<int64_t>(k) * E + base + i];
        mid[c] = s > 0.f ? s : 0.f;
    }
}

// Y[a, n] = (b ? b[n] : 0) + W[n, :] . X[a, :]   for a < A   (X [A, K], Y [A, N]); eight partial sums
// per dot product (one AVX register where the CPU has AVX2: target_clones picks at load time; no FMA
// contraction, -ffp-contract=off).
__attribute__((target_clones("avx2", "default")))
void matmat(const float* W, const float* b, const float* X, int A, int N, int K, float* Y) {
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
        for (int a = 0; a < A; ++a) {
            float* hl = h + (static_cast<int64_t>(rows[a]) * L + l) * P;
            float* cl = c + (static_cast<int64_t>(rows[a]) * L + l) * P;
            const float* gates = &Gt[static_cast<size_t>(a) * G4];
            for (int p = 0; p < P; ++p) {
                float i = sigmoid(gates[p]), f = sigmoid(gates[P + p]);
                float gg = std::tanh(gates[2 * P + p]), o = sigmoid(gates[3 * P + p]);
                cl[p] = f * cl[p] + i * gg;
                hl[p] = o * std::tanh(cl[p]);
            }
        }
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
