// Greedy RNN-T / TDT search with the prediction and joint networks computed here: an L-layer LSTM
// prediction network (first layer's input projection as a per-label table) and a joint
// act(enc_proj + W_dec h + b_dec) -> W_out z + b_out, act tanh or relu. One call per batch; the
// per-step work never returns to Python. Same decisions as asrdecode.transducer.greedy (label
// looping, max_symbols, TDT duration rules, first index on ties). Also icefall's stateless decoder
// (embedding, grouped conv, relu, projection; outputs cached per context). The joint runs on blocks
// of frames (Blocks below); shapes in the Python binding (asrdecode/native/transducer_greedy_lstm.py);
// the dense kernels in dense.cpp.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "abi.h"
#include "dense.h"
#include "guard.h"

using asrd::argmax_first;
using asrd::joint_hidden;
using asrd::log_sum_exp;
using asrd::matmat;
using asrd::Net;
using asrd::predict_rows;
using asrd::product_cost;
using asrd::stateless_mid;

namespace {

// Frame blocking: while an utterance's decoder output is unchanged (blank frames), the joint of its next
// F frames is one matrix product (each output weight read once per F frames, not once per frame); the
// search scans them in order and drops the frames after the first label (their joint used the old
// decoder output). Exact: the rows it scans are the rows the frame-by-frame loop would compute.
//
// F (one for the step, at most each utterance's frames left) maximises the frames expected to be
// scanned, sum_b (1 - p_b^F) / (1 - p_b) (p_b: the utterance's blank rate, a running average of its
// decisions), per unit of the product's cost (asrd::product_cost of all the step's rows).
constexpr int kMaxBlock = 12;

double expected_scanned(double p_blank, int f) {
    double used = 0.0, pj = 1.0;
    for (int j = 0; j < f; ++j, pj *= p_blank) used += pj;
    return used;
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
        for (int b = 0; b < B; ++b) if (t[b] < lens[b]) utt.push_back(b);
        const int A = static_cast<int>(utt.size());
        int best = 1;
        double best_rate = 0.0;
        for (int f = 1; f <= kMaxBlock; ++f) {
            double used = 0.0;
            int rows = 0;
            for (int b : utt) {
                const int fb = f < lens[b] - t[b] ? f : lens[b] - t[b];
                used += expected_scanned(p_blank[b], fb);
                rows += fb;
            }
            if (used / product_cost(rows) > best_rate * 1.0001) { best_rate = used / product_cost(rows); best = f; }
        }
        int rows = 0;
        for (int b : utt) {
            const int fb = best < lens[b] - t[b] ? best : lens[b] - t[b];
            t0.push_back(t[b]); n.push_back(fb); row.push_back(rows);
            rows += fb;
        }
        return A > 0;
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

// icefall's stateless decoder output depends on the last C labels only: the outputs [H] of the
// contexts seen in one call, up to kFloats floats in all (then no more are added).
class ContextCache {
 public:
    ContextCache(int C, int H) : C_(C), H_(H) {}

    const float* find(const int* ctx) const {
        const auto it = index_.find(key(ctx));
        return it == index_.end() ? nullptr : &out_[it->second];
    }

    void add(const int* ctx, const float* g) {
        if (out_.size() + static_cast<size_t>(H_) > kFloats) return;
        if (!index_.emplace(key(ctx), out_.size()).second) return;
        out_.insert(out_.end(), g, g + H_);
    }

 private:
    static constexpr size_t kFloats = size_t(1) << 22;  // 16 MB
    std::string key(const int* ctx) const { return std::string(reinterpret_cast<const char*>(ctx), sizeof(int) * C_); }

    int C_, H_;
    std::unordered_map<std::string, size_t> index_;
    std::vector<float> out_;
};

}  // namespace

extern "C" {

// enc [B, Tmax, H] (projected), lens [B]; outputs [B, cap] + counts [B] + scores [B].
// Returns 0, or -1 when an utterance needs more than cap labels.
static int asr_lstm_greedy_batch_impl(const float* enc, const int* lens, int B, int Tmax, int H,
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
                asrd::check_joint_row(lg, V);
                if (K > 0) asrd::check_joint_row(lg + V, K);
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
static int asr_stateless_greedy_batch_impl(const float* enc, const int* lens, int B, int Tmax, int H, const float* emb, int E,
                                           const float* convw, const float* convb, int G, int C, const float* wp, const float* bp,
                                           const float* wout, const float* bout, int V, int blank, int unk, const int* start_ctx,
                                           int max_symbols, int* out_tokens, int* out_frames, int cap, int* counts,
                                           double* scores) {
    std::vector<int> ctx(static_cast<size_t>(B) * C), t(B, 0), sym(B, 0), rows;
    std::vector<float> x(static_cast<size_t>(C) * E), M, Hg, g(static_cast<size_t>(B) * H);
    ContextCache cache(C, H);
    std::vector<int> miss;
    // the decoder output of the rows whose context changed: seen contexts from the cache, the others by
    // one matrix product (the same rows as without the cache: a row's product never depends on the batch)
    auto project = [&](const std::vector<int>& rs) {
        miss.clear();
        for (int b : rs) {
            const float* seen = cache.find(&ctx[static_cast<size_t>(b) * C]);
            if (seen) std::memcpy(&g[static_cast<size_t>(b) * H], seen, sizeof(float) * H);
            else miss.push_back(b);
        }
        const int R = static_cast<int>(miss.size());
        if (R == 0) return;
        M.resize(static_cast<size_t>(R) * E);
        Hg.resize(static_cast<size_t>(R) * H);
        for (int r = 0; r < R; ++r)
            stateless_mid(&ctx[static_cast<size_t>(miss[r]) * C], C, emb, E, convw, convb, G, x, &M[static_cast<size_t>(r) * E]);
        matmat(wp, bp, M.data(), R, H, E, Hg.data());
        for (int r = 0; r < R; ++r) {
            std::memcpy(&g[static_cast<size_t>(miss[r]) * H], &Hg[static_cast<size_t>(r) * H], sizeof(float) * H);
            cache.add(&ctx[static_cast<size_t>(miss[r]) * C], &Hg[static_cast<size_t>(r) * H]);
        }
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
                asrd::check_joint_row(lg, V);
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

// One greedy call (abi.h's NetSearchArgs; net.kind picks the LSTM or the stateless decoder), behind guard.h:
// an exception becomes kOutOfMemory (-2) or kInternalError (-3). -1: an utterance needs more than capacity.
int asrd_transducer_greedy(const asrd::NetSearchArgs* a) {
    return asrd::guard_code<int>([&] {
        const asrd::TransducerNet& n = a->net;
        const int B = static_cast<int>(a->batch), T = static_cast<int>(a->frames), H = static_cast<int>(n.hidden);
        const int V = static_cast<int>(n.vocab), cap = static_cast<int>(a->capacity);
        const int max_symbols = static_cast<int>(a->max_symbols), blank = static_cast<int>(a->blank);
        if (n.kind == 0) {
            return asr_lstm_greedy_batch_impl(
                a->enc, a->lengths, B, T, H, n.table, n.whh0, static_cast<int>(n.pred_dim),
                static_cast<int>(n.pred_layers), n.wup, n.bup, n.wdec, n.bdec, n.wout, n.bout,
                static_cast<int>(n.outputs), static_cast<int>(n.act), blank, V, a->durations,
                static_cast<int>(a->num_durations), max_symbols, a->out_tokens, a->out_frames, a->out_durs, cap,
                a->counts, a->scores);
        }
        return asr_stateless_greedy_batch_impl(
            a->enc, a->lengths, B, T, H, n.emb, static_cast<int>(n.embed_dim), n.convw, n.convb,
            static_cast<int>(n.groups), static_cast<int>(n.context), n.wp, n.bp, n.wout, n.bout, V, blank,
            static_cast<int>(a->unk), n.start_ctx, max_symbols, a->out_tokens, a->out_frames, cap, a->counts,
            a->scores);
    });
}

}  // extern "C"
