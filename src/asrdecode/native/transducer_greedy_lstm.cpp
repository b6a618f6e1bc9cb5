// Greedy RNN-T / TDT search with the prediction and joint networks computed here: an L-layer LSTM
// prediction network (first layer's input projection as a per-label table) and a joint
// act(enc_proj + W_dec h + b_dec) -> W_out z + b_out, act tanh or relu. One utterance per call; the
// per-step work never returns to Python. Same decisions as asrdecode.transducer.greedy (label
// looping, max_symbols, TDT duration rules, first index on ties). Shapes in the Python binding
// (asrdecode/native/transducer_greedy_lstm.py).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// y[n] = b[n] + sum_k W[n, k] x[k]   (W row-major [N, K]). Eight partial sums per row (one AVX
// register where the CPU has AVX2: target_clones picks at load time; no FMA contraction either way).
__attribute__((target_clones("avx2", "default")))
void matvec(const float* W, const float* b, const float* x, int N, int K, float* y) {
    for (int n = 0; n < N; ++n) {
        const float* w = W + static_cast<int64_t>(n) * K;
        float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        int k = 0;
        for (; k + 8 <= K; k += 8)
            for (int j = 0; j < 8; ++j) acc[j] += w[k + j] * x[k + j];
        float tail = 0.f;
        for (; k < K; ++k) tail += w[k] * x[k];
        y[n] = (b ? b[n] : 0.f) + ((((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])))
                                   + tail);
    }
}

inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

struct Net {
    const float* table; const float* whh0; int P; int L;
    const float* wup; const float* bup;
    const float* wdec; const float* bdec; int H;
    const float* wout; const float* bout; int O; int act;
};

// One LSTM step for `label`: h, c [L, P] updated in place; g = W_dec h_top + b_dec [H].
void predict(const Net& n, int label, float* h, float* c, float* g, std::vector<float>& gates, std::vector<float>& xin) {
    const int P = n.P, G = 4 * P;
    for (int l = 0; l < n.L; ++l) {
        float* hl = h + static_cast<int64_t>(l) * P;
        float* cl = c + static_cast<int64_t>(l) * P;
        if (l == 0) {
            matvec(n.whh0, n.table + static_cast<int64_t>(label) * G, hl, G, P, gates.data());
        } else {
            std::memcpy(xin.data(), h + static_cast<int64_t>(l - 1) * P, sizeof(float) * P);
            std::memcpy(xin.data() + P, hl, sizeof(float) * P);
            matvec(n.wup + static_cast<int64_t>(l - 1) * G * 2 * P, n.bup + static_cast<int64_t>(l - 1) * G,
                   xin.data(), G, 2 * P, gates.data());
        }
        for (int p = 0; p < P; ++p) {  // gates i, f, g, o (torch's order)
            float i = sigmoid(gates[p]), f = sigmoid(gates[P + p]);
            float gg = std::tanh(gates[2 * P + p]), o = sigmoid(gates[3 * P + p]);
            cl[p] = f * cl[p] + i * gg;
            hl[p] = o * std::tanh(cl[p]);
        }
    }
    matvec(n.wdec, n.bdec, h + static_cast<int64_t>(n.L - 1) * P, n.H, P, g);
}

}  // namespace

extern "C" {

// Returns the number of labels written (<= cap), or -1 when more than `cap` would be.
// out_scores[0]: the path's log-probability (label + duration log-softmax terms).
int asr_lstm_greedy(const float* enc, int T, int H,
                    const float* table, const float* whh0, int P, int L, const float* wup, const float* bup,
                    const float* wdec, const float* bdec, const float* wout, const float* bout, int O, int act,
                    int blank, int V, const int* durations, int K, int max_symbols,
                    int* out_tokens, int* out_frames, int* out_durs, int cap, double* out_score) {
    Net n{table, whh0, P, L, wup, bup, wdec, bdec, H, wout, bout, O, act};
    std::vector<float> h(static_cast<size_t>(L) * P, 0.f), c(h.size(), 0.f), g(H), z(H), logits(O);
    std::vector<float> gates(4 * static_cast<size_t>(P)), xin(2 * static_cast<size_t>(P));
    predict(n, blank, h.data(), c.data(), g.data(), gates, xin);
    int t = 0, sym = 0, count = 0;
    double score = 0.0;
    while (t < T) {
        const float* e = enc + static_cast<int64_t>(t) * H;
        for (int k = 0; k < H; ++k) {
            float s = e[k] + g[k];
            z[k] = act == 0 ? std::tanh(s) : (s > 0.f ? s : 0.f);
        }
        matvec(wout, bout, z.data(), O, H, logits.data());
        int y = 0;
        for (int v = 1; v < V; ++v) if (logits[v] > logits[y]) y = v;
        double lse = 0.0;
        for (int v = 0; v < V; ++v) lse += std::exp(static_cast<double>(logits[v] - logits[y]));
        double lp = -std::log(lse);
        int dur = 0;
        if (K > 0) {
            int d = 0;
            for (int k = 1; k < K; ++k) if (logits[V + k] > logits[V + d]) d = k;
            double dl = 0.0;
            for (int k = 0; k < K; ++k) dl += std::exp(static_cast<double>(logits[V + k] - logits[V + d]));
            lp -= std::log(dl);
            dur = durations[d];
        }
        if (y == blank) {
            score += lp;
            t += K > 0 ? (dur > 0 ? dur : 1) : 1;
            sym = 0;
            continue;
        }
        if (count >= cap) return -1;
        out_tokens[count] = y;
        out_frames[count] = t;
        out_durs[count] = dur;
        ++count;
        score += lp;
        ++sym;
        int adv = K > 0 ? dur : 0;
        if (adv == 0 && max_symbols > 0 && sym >= max_symbols) adv = 1;
        if (adv > 0) sym = 0;
        t += adv;
        predict(n, y, h.data(), c.data(), g.data(), gates, xin);
    }
    *out_score = score;
    return count;
}

}  // extern "C"

namespace {

// icefall's stateless decoder: x_k = emb[y_k] (zeros for y_k < 0), grouped conv over the C context
// positions, relu, projection -> g [H].
void stateless_predict(const int* ctx, int C, const float* emb, int E, const float* convw, const float* convb, int G,
                       const float* wp, const float* bp, int H, std::vector<float>& x, std::vector<float>& mid,
                       float* g) {
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
    matvec(wp, bp, mid.data(), H, E, g);
}

}  // namespace

extern "C" {

// Greedy RNN-T search for a stateless (icefall) decoder and a tanh joint over projected encoder
// frames enc [T, H]. start_ctx [C]: the empty hypothesis's context; unk >= 0 with fold_unk=1 counts
// <unk> as blank (max fold). Returns the number of labels, or -1 when more than cap.
int asr_stateless_greedy(const float* enc, int T, int H, const float* emb, int E, const float* convw,
                         const float* convb, int G, int C, const float* wp, const float* bp, const float* wout,
                         const float* bout, int V, int blank, int unk, const int* start_ctx, int max_symbols,
                         int* out_tokens, int* out_frames, int cap, double* out_score) {
    std::vector<int> ctx(start_ctx, start_ctx + C);
    std::vector<float> x(static_cast<size_t>(C) * E), mid(E), g(H), z(H), logits(V);
    stateless_predict(ctx.data(), C, emb, E, convw, convb, G, wp, bp, H, x, mid, g.data());
    int t = 0, sym = 0, count = 0;
    double score = 0.0;
    while (t < T) {
        const float* e = enc + static_cast<int64_t>(t) * H;
        for (int k = 0; k < H; ++k) z[k] = std::tanh(e[k] + g[k]);
        matvec(wout, bout, z.data(), V, H, logits.data());
        if (unk >= 0 && unk != blank) {
            logits[blank] = logits[unk] > logits[blank] ? logits[unk] : logits[blank];
            logits[unk] = -INFINITY;
        }
        int y = 0;
        for (int v = 1; v < V; ++v) if (logits[v] > logits[y]) y = v;
        double lse = 0.0;
        for (int v = 0; v < V; ++v) lse += std::exp(static_cast<double>(logits[v] - logits[y]));
        score -= std::log(lse);
        if (y == blank) { ++t; sym = 0; continue; }
        if (count >= cap) return -1;
        out_tokens[count] = y;
        out_frames[count] = t;
        ++count;
        if (++sym >= max_symbols && max_symbols > 0) { ++t; sym = 0; }
        for (int k = 0; k + 1 < C; ++k) ctx[k] = ctx[k + 1];
        ctx[C - 1] = y;
        stateless_predict(ctx.data(), C, emb, E, convw, convb, G, wp, bp, H, x, mid, g.data());
    }
    *out_score = score;
    return count;
}

}  // extern "C"
