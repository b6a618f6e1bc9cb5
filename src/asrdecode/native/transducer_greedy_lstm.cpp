// Greedy RNN-T / TDT search with the prediction and joint networks computed here: an L-layer LSTM
// prediction network (first layer's input projection as a per-label table) and a joint
// act(enc_proj + W_dec h + b_dec) -> W_out z + b_out, act tanh or relu. One utterance per call; the
// per-step work never returns to Python. Same decisions as asrdecode.transducer.greedy (label
// looping, max_symbols, TDT duration rules, first index on ties). Also icefall's stateless decoder
// (embedding, grouped conv, relu, projection). Shapes in the Python binding
// (asrdecode/native/transducer_greedy_lstm.py); the dense kernels in dense.cpp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "dense.h"

using asrd::matmat;
using asrd::Net;
using asrd::predict_rows;
using asrd::stateless_mid;

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
