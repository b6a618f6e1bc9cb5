// sherpa-onnx's NeMo modified beam search (asrdecode.models.sherpa_nemo_search.nemo_beam_search) with
// an LSTM prediction network and the joint computed here (dense.h's kernels), one utterance after the
// other: frame-asynchronous; the hypotheses at the earliest frame that have not emitted max_symbols
// labels on it are extended by their top `beam` tokens (TDT: with the best duration d*, whose float32
// log-prob every token gets); blank / <unk> step max(1, d*) frames (RNN-T 1), a label stays (RNN-T) or
// steps d* (TDT); the others are carried (at the cap: one frame on); the `beam` best candidates survive
// (std::partial_sort, as sherpa-onnx, so equal scores are ordered the same way). Log-softmax with
// sherpa-onnx's arithmetic (float32 sum of double exp, sequential): equal scores to the bit decide
// ties. A hypothesis's prediction network runs once per label it emitted, when it is next expanded.
// Shapes in the Python binding (asrdecode/native/nemo_beam.py).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

#include "abi.h"
#include "dense.h"
#include "guard.h"

namespace {

using asrd::Net;

// One emitted label: the labels of a hypothesis are its node's chain to the start (-1).
struct Node {
    int parent;
    int token;
    int frame;
    int dur;
};

// A hypothesis: last node, label count, float32 log-prob, frame t, labels on it n, the label not yet
// fed to the prediction network (-1: none; its output g is current), its slot in the state buffers.
struct Hyp {
    int node;
    int len;
    float logp;
    int t;
    int n;
    int pending;
    int slot;
};

// A candidate: the hypothesis it would become (the slot of its parent) and the label it adds (token -1:
// none); its node is made only if it survives, so the node list grows by at most `beam` a step.
struct Cand {
    float logp;
    Hyp h;
    Node label;
};

constexpr Node kNoLabel{-1, -1, 0, 0};

// sherpa-onnx's LogSoftmax over x [n] in place: float sum of double exp(x - m), left to right;
// offset = float(m + log(double(sum))).
void sherpa_log_softmax(float* x, int n) {
    float m = x[0];
    for (int i = 1; i < n; ++i) m = x[i] > m ? x[i] : m;
    float sum = 0.f;
    for (int i = 0; i < n; ++i) sum = static_cast<float>(static_cast<double>(sum) + std::exp(static_cast<double>(x[i] - m)));
    const float offset = static_cast<float>(static_cast<double>(m) + std::log(static_cast<double>(sum)));
    for (int i = 0; i < n; ++i) x[i] -= offset;
}

// sherpa-onnx's TopkIndex: ids of the k largest of x [n], largest first (std::partial_sort's order).
void top_k(const float* x, int n, int k, std::vector<int>& idx) {
    idx.resize(n);
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [x](int a, int b) { return x[a] > x[b]; });
    idx.resize(k);
}

struct Sizes {
    int H, V, O, K, act, blank, unk, cap, beam, maxlen;
};

// One utterance's search over its projected frames enc [T, H]; writes its hypotheses (best first) to
// out_n / out_len / out_score / out_tokens / out_frames / out_durs at its offsets.
class Utterance {
  public:
    Utterance(const Net& net, const Sizes& z, const int* durs) : net_(net), z_(z), durs_(durs) {
        const size_t state = static_cast<size_t>(net.L) * net.P;
        for (int b = 0; b < 2; ++b) {
            h_[b].assign(state * z.beam, 0.f);
            c_[b].assign(state * z.beam, 0.f);
            g_[b].assign(static_cast<size_t>(z.H) * z.beam, 0.f);
        }
    }

    void run(const float* enc, int T, int* out_n, int* out_len, double* out_score, int* out_tokens, int* out_frames,
             int* out_durs) {
        start();
        while (true) {
            int t_min = T;
            for (const Hyp& h : hyps_) t_min = std::min(t_min, h.t);
            if (t_min >= T) break;
            step(enc + static_cast<int64_t>(t_min) * z_.H, t_min);
        }
        write(out_n, out_len, out_score, out_tokens, out_frames, out_durs);
    }

  private:
    // the start hypothesis: zero state fed the blank (slot 0 of buffer 0)
    void start() {
        cur_ = 0;
        nodes_.clear();
        std::fill(h_[0].begin(), h_[0].end(), 0.f);
        std::fill(c_[0].begin(), c_[0].end(), 0.f);
        hyps_.assign(1, Hyp{-1, 0, 0.f, 0, 0, -1, 0});
        asrd::predict_rows(net_, {0}, {z_.blank}, h_[0].data(), c_[0].data(), g_[0].data(), X_, Gt_, Hg_);
    }

    // feed the pending labels of the hypotheses to expand (rows), in place in the current buffer
    void feed(const std::vector<int>& rows) {
        std::vector<int> slots, labels;
        for (int i : rows)
            if (hyps_[i].pending >= 0) {
                slots.push_back(hyps_[i].slot);
                labels.push_back(hyps_[i].pending);
                hyps_[i].pending = -1;
            }
        asrd::predict_rows(net_, slots, labels, h_[cur_].data(), c_[cur_].data(), g_[cur_].data(), X_, Gt_, Hg_);
    }

    // logits [R, O] of frame e [H] with the decoder outputs of rows, log-softmaxed (tokens, durations)
    void joint(const float* e, const std::vector<int>& rows) {
        const int R = static_cast<int>(rows.size()), H = z_.H;
        Z_.resize(static_cast<size_t>(R) * H);
        for (int r = 0; r < R; ++r)
            asrd::joint_hidden(e, g_[cur_].data() + static_cast<int64_t>(hyps_[rows[r]].slot) * H, H, z_.act,
                               &Z_[static_cast<size_t>(r) * H]);
        logits_.resize(static_cast<size_t>(R) * z_.O);
        asrd::matmat(net_.wout, net_.bout, Z_.data(), R, z_.O, H, logits_.data());
        for (int r = 0; r < R; ++r) {
            float* row = &logits_[static_cast<size_t>(r) * z_.O];
            asrd::check_joint_row(row, z_.V);
            sherpa_log_softmax(row, z_.V);
            if (z_.K > 0) {
                asrd::check_joint_row(row + z_.V, z_.K);
                sherpa_log_softmax(row + z_.V, z_.K);
            }
        }
    }

    void step(const float* e, int t_min) {
        std::vector<int> rows;
        for (int i = 0; i < static_cast<int>(hyps_.size()); ++i)
            if (hyps_[i].t == t_min && hyps_[i].n < z_.cap) rows.push_back(i);
        feed(rows);
        if (!rows.empty()) joint(e, rows);
        cands_.clear();
        int r = 0;
        for (int i = 0; i < static_cast<int>(hyps_.size()); ++i) {
            Hyp h = hyps_[i];
            if (h.t > t_min) {
                cands_.push_back({h.logp, h, kNoLabel});
            } else if (h.n >= z_.cap) {
                h.t += 1;
                h.n = 0;
                cands_.push_back({h.logp, h, kNoLabel});
            } else {
                expand(h, &logits_[static_cast<size_t>(r++) * z_.O]);
            }
        }
        select();
    }

    // the top-`beam` children of h from its log-softmaxed row [O]
    void expand(const Hyp& h, const float* row) {
        int d = 0;
        float dlp = 0.f;
        if (z_.K > 0) {
            const int k = asrd::argmax_first(row + z_.V, z_.K);
            d = durs_[k];
            dlp = row[z_.V + k];
        }
        top_k(row, z_.V, z_.beam, topk_);
        for (int tok : topk_) {
            Hyp c = h;
            c.logp = (row[tok] + dlp) + h.logp;
            Node label = kNoLabel;
            if (tok == z_.blank || tok == z_.unk) {
                c.t = h.t + std::max(1, d);
                c.n = 0;
            } else {
                label = Node{h.node, tok, h.t, d};
                c.len = h.len + 1;
                c.t = h.t + d;
                c.n = d > 0 ? 0 : h.n + 1;
                c.pending = tok;
            }
            cands_.push_back({c.logp, c, label});
        }
    }

    // keep the `beam` best candidates (std::partial_sort); their states into the other buffer
    void select() {
        const int k = std::min(z_.beam, static_cast<int>(cands_.size()));
        std::partial_sort(cands_.begin(), cands_.begin() + k, cands_.end(),
                          [](const Cand& a, const Cand& b) { return a.logp > b.logp; });
        const int nxt = 1 - cur_;
        const size_t state = static_cast<size_t>(net_.L) * net_.P;
        hyps_.clear();
        for (int j = 0; j < k; ++j) {
            Hyp h = cands_[j].h;
            if (cands_[j].label.token >= 0) {
                nodes_.push_back(cands_[j].label);
                h.node = static_cast<int>(nodes_.size()) - 1;
            }
            std::memcpy(&h_[nxt][state * j], &h_[cur_][state * h.slot], sizeof(float) * state);
            std::memcpy(&c_[nxt][state * j], &c_[cur_][state * h.slot], sizeof(float) * state);
            std::memcpy(&g_[nxt][static_cast<size_t>(z_.H) * j], &g_[cur_][static_cast<size_t>(z_.H) * h.slot],
                        sizeof(float) * z_.H);
            h.slot = j;
            hyps_.push_back(h);
        }
        cur_ = nxt;
    }

    void write(int* out_n, int* out_len, double* out_score, int* out_tokens, int* out_frames, int* out_durs) {
        std::stable_sort(hyps_.begin(), hyps_.end(), [](const Hyp& a, const Hyp& b) { return a.logp > b.logp; });
        *out_n = static_cast<int>(hyps_.size());
        for (int j = 0; j < *out_n; ++j) {
            const Hyp& h = hyps_[j];
            out_len[j] = h.len;
            out_score[j] = h.logp;
            int node = h.node;
            for (int q = h.len - 1; q >= 0; --q, node = nodes_[node].parent) {
                const int64_t at = static_cast<int64_t>(j) * z_.maxlen + q;
                out_tokens[at] = nodes_[node].token;
                out_frames[at] = nodes_[node].frame;
                out_durs[at] = nodes_[node].dur;
            }
        }
    }

    const Net& net_;
    Sizes z_;
    const int* durs_;
    int cur_ = 0;
    std::vector<float> h_[2], c_[2], g_[2];
    std::vector<Hyp> hyps_;
    std::vector<Cand> cands_;
    std::vector<Node> nodes_;
    std::vector<int> topk_;
    std::vector<float> X_, Gt_, Hg_, Z_, logits_;
};

}  // namespace

extern "C" {

// enc [B, Tmax, H]: the joint's projected encoder frames (W_enc e + b_enc); lens [B]; the LSTM
// prediction network and joint as in dense.h's Net (table [V, 4P], whh0 [4P, P], wup [L-1, 4P, 2P],
// bup [L-1, 4P], wdec [H, P], bdec [H], wout [O, H], bout [O], O = V + K, act 0 tanh / 1 relu);
// durs [K] the TDT duration values (K = 0: RNN-T); unk -1 or the id that extends like blank;
// max_symbols >= 1; beam >= 1. Outputs: out_n [B] hypotheses per utterance (best first), out_len /
// out_score [B, beam], out_tokens / out_frames / out_durs [B, beam, Tmax * max_symbols].
// Returns -1 for arguments out of range.
static int asr_lstm_nemo_beam_impl(const float* enc, const int* lens, int B, int Tmax, int H, const float* table,
                                   const float* whh0, int P, int L, const float* wup, const float* bup, const float* wdec,
                                   const float* bdec, const float* wout, const float* bout, int act, int blank, int V, int K,
                                   const int* durs, int unk, int max_symbols, int beam, int* out_n, int* out_len,
                                   double* out_score, int* out_tokens, int* out_frames, int* out_durs) {
    if (B < 0 || Tmax < 0 || H < 1 || P < 1 || L < 1 || V < 2 || K < 0 || beam < 1 || max_symbols < 1 || blank < 0 ||
        blank >= V || unk >= V || (act != 0 && act != 1) || static_cast<int64_t>(Tmax) * max_symbols > (1 << 30))
        return -1;
    for (int b = 0; b < B; ++b)
        if (lens[b] < 0 || lens[b] > Tmax) return -1;
    for (int k = 0; k < K; ++k)
        if (durs[k] < 0) return -1;
    const int O = V + K, maxlen = Tmax * max_symbols;
    Net net{table, whh0, P, L, wup, bup, wdec, bdec, H, wout, bout, O, act};
    Sizes z{H, V, O, K, act, blank, unk, max_symbols, beam, maxlen};
    Utterance u(net, z, durs);
    for (int b = 0; b < B; ++b) {
        const int64_t hyp0 = static_cast<int64_t>(b) * beam;
        u.run(enc + static_cast<int64_t>(b) * Tmax * H, lens[b], out_n + b, out_len + hyp0, out_score + hyp0,
              out_tokens + hyp0 * maxlen, out_frames + hyp0 * maxlen, out_durs + hyp0 * maxlen);
    }
    return 0;
}

// One NeMo beam call (abi.h's NetSearchArgs; an LSTM net only) behind guard.h: an exception becomes
// kOutOfMemory (-2) or kInternalError (-3).
int asrd_nemo_beam(const asrd::NetSearchArgs* a) {
    return asrd::guard_code<int>([&] {
        const asrd::TransducerNet& n = a->net;
        if (n.kind != 0) return -1;
        return asr_lstm_nemo_beam_impl(
            a->enc, a->lengths, static_cast<int>(a->batch), static_cast<int>(a->frames), static_cast<int>(n.hidden),
            n.table, n.whh0, static_cast<int>(n.pred_dim), static_cast<int>(n.pred_layers), n.wup, n.bup, n.wdec,
            n.bdec, n.wout, n.bout, static_cast<int>(n.act), static_cast<int>(a->blank), static_cast<int>(n.vocab),
            static_cast<int>(a->num_durations), a->durations, static_cast<int>(a->unk),
            static_cast<int>(a->max_symbols), static_cast<int>(a->beam), a->out_n, a->out_len, a->out_score,
            a->out_tokens, a->out_frames, a->out_durs);
    });
}

}  // extern "C"
