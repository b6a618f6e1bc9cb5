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

using asrd::argmax_first;
using asrd::joint_hidden;
using asrd::log_sum_exp;
using asrd::matmat;
using asrd::Net;
using asrd::predict_rows;
using asrd::stateless_mid;

namespace {

// Frame blocking: while an utterance's decoder output is unchanged (blank frames), the joint of its next
// F frames is one matrix product (each output weight read once per F frames, not once per frame); the
// search scans them in order and drops the frames after the first label (their joint used the old
// decoder output). Exact: the rows it scans are the rows the frame-by-frame loop would compute.
//
// F is chosen per utterance from its blank rate p (a running average of its decisions): the F that
// maximises the frames expected to be scanned, (1 - p^F) / (1 - p), per unit of the product's cost
// (kCost: time of F rows relative to one row at the compute-bound rate; one row alone is bound by
// reading the weights). With 3 or more utterances in the step the product is compute-bound already:
// F = 1.
constexpr int kSizes[] = {1, 2, 3, 6, 9, 12};
constexpr double kCost[] = {2.1, 2.4, 3.0, 6.1, 9.1, 12.2};

int block_frames(double p_blank, int left, int active) {
    if (active >= 3 || left <= 1) return 1;
    int best = 1;
    double best_rate = 0.0, pf = 1.0;
    for (int i = 0, f = 0; i < static_cast<int>(sizeof(kSizes) / sizeof(kSizes[0])); ++i) {
        for (; f < kSizes[i]; ++f) pf *= p_blank;  // p^F
        const double used = p_blank >= 1.0 ? kSizes[i] : (1.0 - pf) / (1.0 - p_blank);
        if (used / kCost[i] > best_rate) { best_rate = used / kCost[i]; best = kSizes[i]; }
        if (kSizes[i] >= left) break;
    }
    return best < left ? best : left;
}

// The joint rows of a step: block i covers frames t0[i] .. t0[i] + n[i] - 1 of utterance utt[i], rows
// row[i] .. row[i] + n[i] - 1 of logits [R, O].
struct Blocks {
    std::vector<int> utt, t0, n, row;
    int O = 0;
    std::vector<float> Z, logits;  // [R, H], [R, O]
    std::vector<double> p_blank;   // [B] running blank rate

    explicit Blocks(int B) : p_blank(static_cast<size_t>(B), 0.5) {}

    // blocks for the utterances with frames left (t [B] < lens [B]); false when there are none
    bool plan(int B, const std::vector<int>& t, const int* lens) {
        utt.clear(); t0.clear(); n.clear(); row.clear();
        int active = 0, rows = 0;
        for (int b = 0; b < B; ++b) active += t[b] < lens[b];
        for (int b = 0; b < B; ++b) {
            if (t[b] >= lens[b]) continue;
            const int f = block_frames(p_blank[b], lens[b] - t[b], active);
            utt.push_back(b); t0.push_back(t[b]); n.push_back(f); row.push_back(rows);
            rows += f;
        }
        return active > 0;
    }

    // logits of every planned row: act(enc [B, Tmax, H] at the frame + g [B, H] of the utterance) -> wout, bout
    void run(const float* enc, int Tmax, int H, const float* g, int act, const float* wout, const float* bout, int outs) {
        O = outs;
        const int R = utt.empty() ? 0 : row.back() + n.back();
        Z.resize(static_cast<size_t>(R) * H);
        for (size_t i = 0; i < utt.size(); ++i)
            for (int j = 0; j < n[i]; ++j)
                joint_hidden(enc + (static_cast<int64_t>(utt[i]) * Tmax + t0[i] + j) * H, g + static_cast<int64_t>(utt[i]) * H,
                             H, act, &Z[static_cast<size_t>(row[i] + j) * H]);
        logits.resize(static_cast<size_t>(R) * O);
        matmat(wout, bout, Z.data(), R, O, H, logits.data());
    }

    // the logits of frame t of block i, nullptr when the block does not hold it
    float* at(size_t i, int t) {
        const int j = t - t0[i];
        return j >= 0 && j < n[i] ? &logits[static_cast<size_t>(row[i] + j) * O] : nullptr;
    }

    void seen(int b, bool blank) { p_blank[b] += ((blank ? 1.0 : 0.0) - p_blank[b]) / 16.0; }
};

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
    std::vector<float> X, Gt, Hg;
    std::vector<int> t(B, 0), sym(B, 0), rows, labels;
    for (int b = 0; b < B; ++b) { counts[b] = 0; scores[b] = 0.0; rows.push_back(b); labels.push_back(blank); }
    predict_rows(n, rows, labels, h.data(), c.data(), g.data(), X, Gt, Hg);
    Blocks blk(B);
    while (blk.plan(B, t, lens)) {
        blk.run(enc, Tmax, H, g.data(), act, wout, bout, O);
        rows.clear();
        labels.clear();
        for (size_t i = 0; i < blk.utt.size(); ++i) {
            const int b = blk.utt[i];
            float* lg;  // the block's frames in order, up to the first label
            while (t[b] < lens[b] && (lg = blk.at(i, t[b])) != nullptr) {
                const int y = argmax_first(lg, V);
                double lp = -log_sum_exp(lg, V, lg[y]);
                int dur = 0;
                if (K > 0) {
                    const int d = argmax_first(lg + V, K);
                    lp -= log_sum_exp(lg + V, K, lg[V + d]);
                    dur = durations[d];
                }
                scores[b] += lp;
                blk.seen(b, y == blank);
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
                break;
            }
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
    std::vector<int> ctx(static_cast<size_t>(B) * C), t(B, 0), sym(B, 0), rows;
    std::vector<float> x(static_cast<size_t>(C) * E), M, Hg, g(static_cast<size_t>(B) * H);
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
    Blocks blk(B);
    while (blk.plan(B, t, lens)) {
        blk.run(enc, Tmax, H, g.data(), 0, wout, bout, V);
        rows.clear();
        for (size_t i = 0; i < blk.utt.size(); ++i) {
            const int b = blk.utt[i];
            float* lg;  // the block's frames in order, up to the first label
            while (t[b] < lens[b] && (lg = blk.at(i, t[b])) != nullptr) {
                if (unk >= 0 && unk != blank) {
                    lg[blank] = lg[unk] > lg[blank] ? lg[unk] : lg[blank];
                    lg[unk] = -INFINITY;
                }
                const int y = argmax_first(lg, V);
                scores[b] -= log_sum_exp(lg, V, lg[y]);
                blk.seen(b, y == blank);
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
                break;
            }
        }
        project(rows);
    }
    return 0;
}

}  // extern "C"
