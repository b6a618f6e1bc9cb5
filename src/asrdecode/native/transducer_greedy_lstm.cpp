// Greedy RNN-T / TDT search with the prediction and joint networks computed here: an L-layer LSTM
// prediction network (first layer's input projection as a per-label table) and a joint
// act(enc_proj + W_dec h + b_dec) -> W_out z + b_out, act tanh or relu. One utterance per call; the
// per-step work never returns to Python. Same decisions as asrdecode.transducer.greedy (label
// looping, max_symbols, TDT duration rules, first index on ties). Also icefall's stateless decoder
// (embedding, grouped conv, relu, projection). Shapes in the Python binding
// (asrdecode/native/transducer_greedy_lstm.py).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

struct Net {
    const float* table; const float* whh0; int P; int L;
    const float* wup; const float* bup;
    const float* wdec; const float* bdec; int H;
    const float* wout; const float* bout; int O; int act;
};

}  // namespace

namespace {

void matmat(const float* W, const float* b, const float* X, int A, int N, int K, float* Y);

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

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Batched variants: every step computes the joint (and the prediction network for the rows that
// emitted) for all active utterances at once, so each weight row is read once per step for the whole
// batch. Same float operations per row as the single-utterance kernels (same results).
namespace {

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

}  // namespace

extern "C" {

// enc [B, Tmax, H] (projected), lens [B]; outputs [B, cap] + counts [B] + scores [B].
// Returns 0, or -1 when an utterance needs more than cap labels.
int asr_lstm_greedy_batch(const float* enc, const int* lens, int B, int Tmax, int H,
                          const float* table, const float* whh0, int P, int L, const float* wup, const float* bup,
                          const float* wdec, const float* bdec, const float* wout, const float* bout, int O, int act,
                          int blank, int V, const int* durations, int K, int max_symbols,
                          int* out_tokens, int* out_frames, int* out_durs, int cap, int* counts, double* scores) {
    Net n{table, whh0, P, L, wup, bup, wdec, bdec, H, wout, bout, O, act};
    std::vector<float> h(static_cast<size_t>(B) * L * P, 0.f), c(h.size(), 0.f), g(static_cast<size_t>(B) * H);
    std::vector<float> X, Gt, Hg, Z, logits;
    std::vector<int> t(B, 0), sym(B, 0), rows, labels, active;
    for (int b = 0; b < B; ++b) { counts[b] = 0; scores[b] = 0.0; rows.push_back(b); labels.push_back(blank); }
    predict_rows(n, rows, labels, h.data(), c.data(), g.data(), X, Gt, Hg);
    while (true) {
        active.clear();
        for (int b = 0; b < B; ++b) if (t[b] < lens[b]) active.push_back(b);
        const int A = static_cast<int>(active.size());
        if (A == 0) break;
        Z.resize(static_cast<size_t>(A) * H);
        for (int a = 0; a < A; ++a) {
            const int b = active[a];
            const float* e = enc + (static_cast<int64_t>(b) * Tmax + t[b]) * H;
            const float* gb = &g[static_cast<size_t>(b) * H];
            for (int k = 0; k < H; ++k) {
                float s = e[k] + gb[k];
                Z[static_cast<size_t>(a) * H + k] = act == 0 ? std::tanh(s) : (s > 0.f ? s : 0.f);
            }
        }
        logits.resize(static_cast<size_t>(A) * O);
        matmat(wout, bout, Z.data(), A, O, H, logits.data());
        rows.clear();
        labels.clear();
        for (int a = 0; a < A; ++a) {
            const int b = active[a];
            const float* lg = &logits[static_cast<size_t>(a) * O];
            int y = 0;
            for (int v = 1; v < V; ++v) if (lg[v] > lg[y]) y = v;
            double lse = 0.0;
            for (int v = 0; v < V; ++v) lse += std::exp(static_cast<double>(lg[v] - lg[y]));
            double lp = -std::log(lse);
            int dur = 0;
            if (K > 0) {
                int d = 0;
                for (int k = 1; k < K; ++k) if (lg[V + k] > lg[V + d]) d = k;
                double dl = 0.0;
                for (int k = 0; k < K; ++k) dl += std::exp(static_cast<double>(lg[V + k] - lg[V + d]));
                lp -= std::log(dl);
                dur = durations[d];
            }
            scores[b] += lp;
            if (y == blank) {
                t[b] += K > 0 ? (dur > 0 ? dur : 1) : 1;
                sym[b] = 0;
                continue;
            }
            if (counts[b] >= cap) return -1;
            const int64_t at = static_cast<int64_t>(b) * cap + counts[b]++;
            out_tokens[at] = y;
            out_frames[at] = t[b];
            out_durs[at] = dur;
            ++sym[b];
            int adv = K > 0 ? dur : 0;
            if (adv == 0 && max_symbols > 0 && sym[b] >= max_symbols) adv = 1;
            if (adv > 0) sym[b] = 0;
            t[b] += adv;
            rows.push_back(b);
            labels.push_back(y);
        }
        predict_rows(n, rows, labels, h.data(), c.data(), g.data(), X, Gt, Hg);
    }
    return 0;
}

}  // extern "C"

extern "C" {

// Batched stateless greedy: enc [B, Tmax, H] (projected), lens [B]; outputs [B, cap] + counts + scores.
int asr_stateless_greedy_batch(const float* enc, const int* lens, int B, int Tmax, int H, const float* emb, int E,
                               const float* convw, const float* convb, int G, int C, const float* wp, const float* bp,
                               const float* wout, const float* bout, int V, int blank, int unk, const int* start_ctx,
                               int max_symbols, int* out_tokens, int* out_frames, int cap, int* counts,
                               double* scores) {
    std::vector<int> ctx(static_cast<size_t>(B) * C), t(B, 0), sym(B, 0), active, rows;
    std::vector<float> x(static_cast<size_t>(C) * E), M, Hg, g(static_cast<size_t>(B) * H), Z, logits;
    // the projection of the rows whose context changed, as one matrix product
    auto project = [&](const std::vector<int>& rs) {
        const int R = static_cast<int>(rs.size());
        if (R == 0) return;
        M.resize(static_cast<size_t>(R) * E);
        Hg.resize(static_cast<size_t>(R) * H);
        for (int r = 0; r < R; ++r)
            stateless_mid(&ctx[static_cast<size_t>(rs[r]) * C], C, emb, E, convw, convb, G, x, &M[static_cast<size_t>(r) * E]);
        matmat(wp, bp, M.data(), R, H, E, Hg.data());
        for (int r = 0; r < R; ++r)
            std::memcpy(&g[static_cast<size_t>(rs[r]) * H], &Hg[static_cast<size_t>(r) * H], sizeof(float) * H);
    };
    for (int b = 0; b < B; ++b) {
        counts[b] = 0;
        scores[b] = 0.0;
        std::memcpy(&ctx[static_cast<size_t>(b) * C], start_ctx, sizeof(int) * C);
        rows.push_back(b);
    }
    project(rows);
    while (true) {
        active.clear();
        for (int b = 0; b < B; ++b) if (t[b] < lens[b]) active.push_back(b);
        const int A = static_cast<int>(active.size());
        if (A == 0) break;
        rows.clear();
        Z.resize(static_cast<size_t>(A) * H);
        for (int a = 0; a < A; ++a) {
            const int b = active[a];
            const float* e = enc + (static_cast<int64_t>(b) * Tmax + t[b]) * H;
            for (int k = 0; k < H; ++k) Z[static_cast<size_t>(a) * H + k] = std::tanh(e[k] + g[static_cast<size_t>(b) * H + k]);
        }
        logits.resize(static_cast<size_t>(A) * V);
        matmat(wout, bout, Z.data(), A, V, H, logits.data());
        for (int a = 0; a < A; ++a) {
            const int b = active[a];
            float* lg = &logits[static_cast<size_t>(a) * V];
            if (unk >= 0 && unk != blank) {
                lg[blank] = lg[unk] > lg[blank] ? lg[unk] : lg[blank];
                lg[unk] = -INFINITY;
            }
            int y = 0;
            for (int v = 1; v < V; ++v) if (lg[v] > lg[y]) y = v;
            double lse = 0.0;
            for (int v = 0; v < V; ++v) lse += std::exp(static_cast<double>(lg[v] - lg[y]));
            scores[b] -= std::log(lse);
            if (y == blank) { ++t[b]; sym[b] = 0; continue; }
            if (counts[b] >= cap) return -1;
            const int64_t at = static_cast<int64_t>(b) * cap + counts[b]++;
            out_tokens[at] = y;
            out_frames[at] = t[b];
            if (++sym[b] >= max_symbols && max_symbols > 0) { ++t[b]; sym[b] = 0; }
            int* cb = &ctx[static_cast<size_t>(b) * C];
            for (int k = 0; k + 1 < C; ++k) cb[k] = cb[k + 1];
            cb[C - 1] = y;
            rows.push_back(b);
        }
        project(rows);
    }
    return 0;
}

}  // extern "C"
