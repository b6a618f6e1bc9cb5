// sherpa-onnx's modified beam search (asrdecode.models.sherpa_search.modified_beam_search) with the
// prediction and joint networks computed here: one symbol per frame; every hypothesis is extended by
// blank (or <unk>, which extends like blank) or by one label; the `beam` best (hypothesis, token)
// pairs of an utterance survive; pairs spelling the same label sequence merge (log-add, double).
// Scores add float32 log-softmax values as sherpa-onnx does; ties in the top-k go to the lower flat
// index (hypothesis * V + token). One call decodes a batch: per frame, the hypotheses of all active
// utterances go through the joint as one matrix product; the prediction network runs only for the
// hypotheses that emitted (LSTM: the parent's state copied, then one step; icefall's stateless
// decoder: its output depends only on the last C labels, cached per context). Shapes in the Python
// binding (asrdecode/native/modified_beam.py); the networks' kernels (products, LSTM step, activation,
// log-softmax) are dense.h's, as in the greedy search.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "abi.h"
#include "dense.h"
#include "guard.h"
#include "transducer_pred.h"

namespace {

using asrd::matmat;
using asrd::Net;
using asrd::extend_key;
using asrd::LstmPred;
using asrd::StatelessNet;
using asrd::StatelessPred;

// One emitted label of a hypothesis: the labels of a hypothesis are its node's chain to the start (-1).
struct Node {
    int parent;
    int token;
    int frame;
};

// A live hypothesis: last node (-1: none emitted), label count, log-probability, a hash of its labels,
// its row in the prediction network's state.
struct Hyp {
    int node;
    int len;
    double score;
    uint64_t key;
    int row;
};

// A (hypothesis, token) pair of the top-k: float32 score, flat index parent * V + token.
struct Cand {
    float s;
    int idx;
};

inline bool better(const Cand& a, const Cand& b) { return a.s > b.s || (a.s == b.s && a.idx < b.idx); }

// logaddexp in double as torch computes it
inline double log_add(double a, double b) {
    if (std::isinf(a) && a == b) return a;
    const double m = a > b ? a : b;
    return m + std::log1p(std::exp(-std::fabs(a - b)));
}

// Whether node chains a and b spell the same labels (equal lengths assumed).
bool same_nodes(const std::vector<Node>& nodes, int a, int b) {
    while (a != b) {
        if (a < 0 || b < 0 || nodes[a].token != nodes[b].token) return false;
        a = nodes[a].parent;
        b = nodes[b].parent;
    }
    return true;
}

// Whether labels(na) + [ta] equal labels(nb) + [tb] (t < 0: nothing appended; equal lengths assumed).
bool same_seq(const std::vector<Node>& nodes, int na, int ta, int nb, int tb) {
    if (ta >= 0 && tb >= 0) return ta == tb && same_nodes(nodes, na, nb);
    if (ta < 0 && tb < 0) return same_nodes(nodes, na, nb);
    if (ta < 0) return same_seq(nodes, nb, tb, na, ta);
    return nb >= 0 && nodes[nb].token == ta && same_nodes(nodes, na, nodes[nb].parent);
}

// Log-softmax of one logits row lg [V] in float32 (dense.h's fast_log_softmax): out [V]. `fold` >= 0: that
// <unk> id counts as blank by max (blank's logit max(blank, unk), unk's -inf).
void log_softmax(float* lg, int V, int blank, int fold, float* out) {
    if (fold >= 0 && fold != blank) {
        lg[blank] = lg[fold] > lg[blank] ? lg[fold] : lg[blank];
        lg[fold] = -INFINITY;
    }
    asrd::check_joint_row(lg, V);
    asrd::fast_log_softmax(lg, V, out);
}

// The joint (act(enc + g) -> W_out z + b_out over the first V outputs), the search's settings, outputs.
struct Search {
    const float* enc; const int* lens; int B; int Tmax; int H;
    const float* wout; const float* bout; int act; int V; int blank; int unk; int fold; int beam;
    int* out_n; int* out_len; double* out_score; int* out_tokens; int* out_frames;
};

// One surviving entry of an utterance's frame: its parent hypothesis (index in the utterance), the
// label it emits (-1: none), its score and label hash.
struct Entry {
    int parent;
    int token;
    double score;
    uint64_t key;
    int len;
};

void write_output(const Search& s, int b, const std::vector<Hyp>& hyps, const std::vector<Node>& nodes) {
    s.out_n[b] = static_cast<int>(hyps.size());
    for (size_t j = 0; j < hyps.size(); ++j) {
        const int64_t slot = static_cast<int64_t>(b) * s.beam + static_cast<int64_t>(j);
        s.out_len[slot] = hyps[j].len;
        s.out_score[slot] = hyps[j].score;
        int pos = hyps[j].len, node = hyps[j].node;
        while (node >= 0) {  // labels back to front
            --pos;
            s.out_tokens[slot * s.Tmax + pos] = nodes[node].token;
            s.out_frames[slot * s.Tmax + pos] = nodes[node].frame;
            node = nodes[node].parent;
        }
    }
}

// The top `beam` (hypothesis, token) pairs of one utterance, best first: hypothesis j's log-softmax
// row is lsm [at[j], V], added to its score in float32.
void top_k(const float* lsm, const int* at, const std::vector<Hyp>& hyps, int V, int beam, std::vector<Cand>& top) {
    top.clear();
    const int n = static_cast<int>(hyps.size());
    for (int j = 0; j < n; ++j) {
        const float base = static_cast<float>(hyps[j].score);
        const float* row = lsm + static_cast<size_t>(at[j]) * V;
        for (int v = 0; v < V; ++v) {
            const Cand c{row[v] + base, j * V + v};
            if (static_cast<int>(top.size()) == beam && !better(c, top.back())) continue;
            auto it = std::upper_bound(top.begin(), top.end(), c, better);
            top.insert(it, c);
            if (static_cast<int>(top.size()) > beam) top.pop_back();
        }
    }
}

// Merge the top pairs by label sequence (first occurrence keeps its place and alignment).
void merge(const Search& s, const std::vector<Cand>& top, const std::vector<Hyp>& hyps,
           const std::vector<Node>& nodes, std::vector<Entry>& out) {
    out.clear();
    for (const Cand& c : top) {
        const int parent = c.idx / s.V, tok = c.idx % s.V;
        const Hyp& p = hyps[parent];
        const bool emits = tok != s.blank && tok != s.unk;
        Entry e{parent, emits ? tok : -1, static_cast<double>(c.s), emits ? extend_key(p.key, tok) : p.key,
                p.len + (emits ? 1 : 0)};
        bool merged = false;
        for (Entry& o : out) {
            if (o.len != e.len || o.key != e.key) continue;
            if (!same_seq(nodes, hyps[o.parent].node, o.token, p.node, e.token)) continue;
            o.score = log_add(o.score, e.score);
            merged = true;
            break;
        }
        if (!merged) out.push_back(e);
    }
}

// The search over one batch: per utterance its hypotheses, all labels in one node arena.
template <class Pred>
class Beams {
public:
    Beams(const Search& s, Pred& pred) : s_(s), pred_(pred), hyps_(s.B) {}

    void run() {
        int rows = 0;
        for (int b = 0; b < s_.B; ++b) {
            if (s_.lens[b] > 0) hyps_[b].push_back(Hyp{-1, 0, 0.0, 0, rows++});
            else write_output(s_, b, {Hyp{-1, 0, 0.0, 0, 0}}, nodes_);
        }
        if (rows > 0) pred_.start(rows);
        for (int t = 0; rows > 0; ++t) {
            active_.clear();
            for (int b = 0; b < s_.B; ++b) if (t < s_.lens[b]) active_.push_back(b);
            joint(t, rows);
            parents_.clear();
            labels_.clear();
            int r = 0;
            for (int b : active_) {
                const int n = static_cast<int>(hyps_[b].size());
                extend(b, t, &at_[r]);
                r += n;
            }
            rows = static_cast<int>(parents_.size());
            if (rows > 0) pred_.advance(parents_, labels_);
        }
    }

private:
    // Log-softmax rows lsm_ [U, V] over the distinct decoder outputs of each active utterance's
    // hypotheses (stateless decoders: hypotheses ending in the same context share one); at_: each
    // hypothesis's row. Z [U, H] -> logits [U, V] is one product.
    void joint(int t, int rows) {
        Z_.resize(static_cast<size_t>(rows) * s_.H);
        at_.clear();
        int U = 0;
        for (int b : active_) {
            const float* e = s_.enc + (static_cast<int64_t>(b) * s_.Tmax + t) * s_.H;
            const int first = U;
            for (const Hyp& h : hyps_[b]) {
                const float* g = pred_.g(h.row);
                int q = first;
                while (q < U && gs_[q - first] != g) ++q;
                if (q == U) {
                    gs_.resize(U - first + 1);
                    gs_[U - first] = g;
                    asrd::joint_hidden(e, g, s_.H, s_.act, &Z_[static_cast<size_t>(U++) * s_.H]);
                }
                at_.push_back(q);
            }
        }
        logits_.resize(static_cast<size_t>(U) * s_.V);
        lsm_.resize(logits_.size());
        matmat(s_.wout, s_.bout, Z_.data(), U, s_.V, s_.H, logits_.data());
        for (int q = 0; q < U; ++q)
            log_softmax(&logits_[static_cast<size_t>(q) * s_.V], s_.V, s_.blank, s_.fold,
                        &lsm_[static_cast<size_t>(q) * s_.V]);
    }

    // Utterance b's frame t: top-k, merge, its new hypotheses (written out after its last frame, else
    // queued as the next frame's prediction rows: parent row, label or -1).
    void extend(int b, int t, const int* at) {
        std::vector<Hyp>& hs = hyps_[b];
        top_k(lsm_.data(), at, hs, s_.V, s_.beam, top_);
        merge(s_, top_, hs, nodes_, entries_);
        const bool last = t + 1 == s_.lens[b];
        next_.clear();
        for (const Entry& e : entries_) {
            const Hyp& p = hs[e.parent];
            int node = p.node;
            if (e.token >= 0) {
                nodes_.push_back(Node{p.node, e.token, t});
                node = static_cast<int>(nodes_.size()) - 1;
            }
            next_.push_back(Hyp{node, e.len, e.score, e.key, last ? -1 : static_cast<int>(parents_.size())});
            if (!last) {
                parents_.push_back(p.row);
                labels_.push_back(e.token);
            }
        }
        hs.swap(next_);
        if (last) write_output(s_, b, hs, nodes_);
    }

    const Search& s_;
    Pred& pred_;
    std::vector<std::vector<Hyp>> hyps_;
    std::vector<Hyp> next_;
    std::vector<Node> nodes_;
    std::vector<int> active_, parents_, labels_, at_;
    std::vector<const float*> gs_;  // an utterance's distinct decoder outputs
    std::vector<float> Z_, logits_, lsm_;
    std::vector<Cand> top_;
    std::vector<Entry> entries_;
};

}  // namespace

extern "C" {

// LSTM prediction network (NeMo / LSTMTransducer): enc [B, Tmax, H] projected by the joint's encoder
// matrix, lens [B]; weights as in dense.h's Net (O >= V outputs, the first V read). unk: id that
// extends like blank (-1: none); fold: id folded into blank by max (-1: none). Outputs: out_n [B]
// hypotheses per utterance, out_len / out_score [B, beam], out_tokens / out_frames [B, beam, Tmax].
static int asr_lstm_modified_beam_impl(const float* enc, const int* lens, int B, int Tmax, int H, const float* table,
                                       const float* whh0, int P, int L, const float* wup, const float* bup, const float* wdec,
                                       const float* bdec, const float* wout, const float* bout, int O, int act, int blank, int V,
                                       int unk, int fold, int beam, int* out_n, int* out_len, double* out_score,
                                       int* out_tokens, int* out_frames) {
    if (B < 0 || Tmax < 0 || H < 1 || V < 1 || O < V || beam < 1 || blank < 0 || blank >= V) return -1;
    Net n{table, whh0, P, L, wup, bup, wdec, bdec, H, wout, bout, O, act};
    Search s{enc, lens, B, Tmax, H, wout, bout, act, V, blank, unk, fold, beam,
             out_n, out_len, out_score, out_tokens, out_frames};
    LstmPred pred(n, blank);
    Beams<LstmPred>(s, pred).run();
    return 0;
}


// icefall's stateless decoder (embedding, grouped conv over C labels, relu, projection wp / bp) and a
// tanh joint: enc [B, Tmax, H] (icefall's projected encoder_out); start_ctx [C]. Outputs as above.
static int asr_stateless_modified_beam_impl(const float* enc, const int* lens, int B, int Tmax, int H, const float* emb, int E,
                                            const float* convw, const float* convb, int G, int C, const float* wp,
                                            const float* bp, const float* wout, const float* bout, int V, int blank, int unk,
                                            int fold, const int* start_ctx, int beam, int* out_n, int* out_len,
                                            double* out_score, int* out_tokens, int* out_frames) {
    if (B < 0 || Tmax < 0 || H < 1 || V < 1 || C < 1 || G < 1 || E % G != 0 || beam < 1 || blank < 0 || blank >= V)
        return -1;
    StatelessNet n{emb, E, convw, convb, G, C, wp, bp, H};
    Search s{enc, lens, B, Tmax, H, wout, bout, 0, V, blank, unk, fold, beam,
             out_n, out_len, out_score, out_tokens, out_frames};
    StatelessPred pred(n, start_ctx);
    Beams<StatelessPred>(s, pred).run();
    return 0;
}

// One modified beam call (abi.h's NetSearchArgs; net.kind picks the LSTM or the stateless decoder) behind
// guard.h: an exception becomes kOutOfMemory (-2) or kInternalError (-3); -1: arguments refused.
int asrd_modified_beam(const asrd::NetSearchArgs* a) {
    return asrd::guard_code<int>([&] {
        const asrd::TransducerNet& n = a->net;
        const int B = static_cast<int>(a->batch), T = static_cast<int>(a->frames), H = static_cast<int>(n.hidden);
        const int V = static_cast<int>(n.vocab), blank = static_cast<int>(a->blank);
        const int unk = static_cast<int>(a->unk), fold = static_cast<int>(a->fold), beam = static_cast<int>(a->beam);
        if (n.kind == 0) {
            return asr_lstm_modified_beam_impl(
                a->enc, a->lengths, B, T, H, n.table, n.whh0, static_cast<int>(n.pred_dim),
                static_cast<int>(n.pred_layers), n.wup, n.bup, n.wdec, n.bdec, n.wout, n.bout,
                static_cast<int>(n.outputs), static_cast<int>(n.act), blank, V, unk, fold, beam, a->out_n,
                a->out_len, a->out_score, a->out_tokens, a->out_frames);
        }
        return asr_stateless_modified_beam_impl(
            a->enc, a->lengths, B, T, H, n.emb, static_cast<int>(n.embed_dim), n.convw, n.convb,
            static_cast<int>(n.groups), static_cast<int>(n.context), n.wp, n.bp, n.wout, n.bout, V, blank, unk, fold,
            n.start_ctx, beam, a->out_n, a->out_len, a->out_score, a->out_tokens, a->out_frames);
    });
}

}  // extern "C"
