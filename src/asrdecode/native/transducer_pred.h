// The prediction networks the native searches run over rows of hypotheses (sherpa-onnx's modified beam
// search in transducer_modified_beam.cpp, ALSD++ / AES++ in transducer_beam_net.cpp), on dense.h's
// kernels: an LSTM (LstmPred: per row h, c [L, P] and the projected output g [H]) and icefall's
// stateless decoder (StatelessPred: per row its context of C labels, outputs cached per context). Both
// advance the same way: new row j continues row parents[j], one step on labels[j] where labels[j] >= 0.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dense.h"

namespace asrd {

// A 64-bit hash of a label sequence, extended by one label.
inline uint64_t extend_key(uint64_t key, int token) {
    uint64_t x = (key ^ (static_cast<uint64_t>(token) + 0x9e3779b97f4a7c15ULL)) * 0xbf58476d1ce4e5b9ULL;
    return x ^ (x >> 31);
}

// What names a hypothesis's label sequence in a search (the prefix hash of asrdecode.beam_hyps, the
// length, the last label): equal keys are the same sequence, so the same prediction-network state.
struct SeqKey {
    int64_t hash, len, last;
    bool operator==(const SeqKey& o) const { return hash == o.hash && len == o.len && last == o.last; }
};

struct SeqKeyHash {
    size_t operator()(const SeqKey& k) const {
        return static_cast<size_t>(extend_key(extend_key(static_cast<uint64_t>(k.hash), static_cast<int>(k.len)),
                                              static_cast<int>(k.last)));
    }
};

// The LSTM prediction network: per row h, c [L, P] and its projected output g [H].
class LstmPred {
public:
    LstmPred(const Net& n, int blank) : n_(n), blank_(blank) {}

    // `rows` rows fed the start label (blank) from the zero state.
    void start(int rows) {
        h_.assign(static_cast<size_t>(rows) * n_.L * n_.P, 0.f);
        c_.assign(h_.size(), 0.f);
        g_.resize(static_cast<size_t>(rows) * n_.H);
        wait_.assign(static_cast<size_t>(rows), -1);
        wait_key_.assign(static_cast<size_t>(rows), SeqKey{0, 0, 0});
        std::vector<int> all(rows), labels(rows, blank_);
        for (int r = 0; r < rows; ++r) all[r] = r;
        predict_rows(n_, all, labels, h_.data(), c_.data(), g_.data(), X_, Gt_, Hg_);
    }

    const float* g(int row) const { return &g_[static_cast<size_t>(row) * n_.H]; }

    // `rows` rows with the states h, c [rows, L, P] (a carried search); their outputs g from h's top layer,
    // by the product predict_rows ends with (each row as it computes it).
    void load(int rows, const float* h, const float* c) {
        const size_t S = static_cast<size_t>(n_.L) * n_.P, P = n_.P;
        h_.assign(h, h + rows * S);
        c_.assign(c, c + rows * S);
        g_.resize(static_cast<size_t>(rows) * n_.H);
        wait_.assign(static_cast<size_t>(rows), -1);
        wait_key_.assign(static_cast<size_t>(rows), SeqKey{0, 0, 0});
        X_.resize(rows * P);
        for (int r = 0; r < rows; ++r) std::memcpy(&X_[r * P], &h_[r * S + (n_.L - 1) * P], sizeof(float) * P);
        if (rows > 0) matmat(n_.wdec, n_.bdec, X_.data(), rows, n_.H, n_.P, g_.data());
    }

    // The rows' states into h, c [rows, L, P] (the steps still waiting computed first: their g too).
    void save(float* h, float* c) {
        ready_.clear();
        for (size_t j = 0; j < wait_.size(); ++j)
            if (wait_[j] >= 0) ready_.push_back(static_cast<int64_t>(j));
        ensure(ready_.data(), static_cast<int64_t>(ready_.size()));
        std::memcpy(h, h_.data(), sizeof(float) * h_.size());
        std::memcpy(c, c_.data(), sizeof(float) * c_.size());
    }

    // New row j continues row parents[j], one step on labels[j] where labels[j] >= 0. With `keys`, keys[j]
    // names the label sequence row j holds after its step: a step to a sequence this object computed before
    // is copied from its cache (up to kCacheFloats floats of states; a row's step never depends on the
    // others, so the copy is what the step computes). With `defer` (and keys) a row's step waits until
    // ensure() asks for its output (a row the search drops before then is never computed). The rows are
    // updated in place: a row that continues itself without a step is not touched.
    void advance(const std::vector<int>& parents, const std::vector<int>& labels,
                 const std::vector<SeqKey>* keys = nullptr, bool defer = false) {
        const int R = static_cast<int>(parents.size());
        const size_t S = static_cast<size_t>(n_.L) * n_.P, H = n_.H;
        defer = defer && keys;
        ready_.clear();  // a step from a row whose own step waits: that one first
        for (int j = 0; j < R; ++j)
            if (labels[j] >= 0 && wait_[parents[j]] >= 0) ready_.push_back(parents[j]);
        ensure(ready_.data(), static_cast<int64_t>(ready_.size()));
        moved_.clear();  // the rows that take another row's state: gathered first, then written
        for (int j = 0; j < R; ++j)
            if (parents[j] != j) moved_.push_back(j);
        const size_t M = moved_.size();
        mh_.resize(M * S);
        mc_.resize(M * S);
        mg_.resize(M * H);
        mwait_.resize(M);
        mkey_.resize(M);
        for (size_t i = 0; i < M; ++i) {
            const size_t p = parents[moved_[i]];
            std::memcpy(&mh_[i * S], &h_[p * S], sizeof(float) * S);
            std::memcpy(&mc_[i * S], &c_[p * S], sizeof(float) * S);
            std::memcpy(&mg_[i * H], &g_[p * H], sizeof(float) * H);
            mwait_[i] = wait_[p];
            mkey_[i] = wait_key_[p];
        }
        h_.resize(R * S);
        c_.resize(R * S);
        g_.resize(R * H);
        wait_.resize(R, -1);
        wait_key_.resize(R);
        for (size_t i = 0; i < M; ++i) {
            const size_t j = moved_[i];
            std::memcpy(&h_[j * S], &mh_[i * S], sizeof(float) * S);
            std::memcpy(&c_[j * S], &mc_[i * S], sizeof(float) * S);
            std::memcpy(&g_[j * H], &mg_[i * H], sizeof(float) * H);
            wait_[j] = mwait_[i];
            wait_key_[j] = mkey_[i];
        }
        rows_.clear();
        emit_.clear();
        emit_key_.clear();
        same_.clear();
        pending_.clear();
        for (int j = 0; j < R; ++j) {
            if (labels[j] < 0) continue;
            wait_[j] = -1;
            if (keys) {
                if (copy_cached((*keys)[j], j)) continue;
                if (defer) {
                    wait_[j] = labels[j];
                    wait_key_[j] = (*keys)[j];
                    continue;
                }
                const auto first = pending_.emplace((*keys)[j], j);
                if (!first.second) {  // the same sequence as an earlier row of this step: copied after it
                    same_.emplace_back(j, first.first->second);
                    continue;
                }
            }
            rows_.push_back(j);
            emit_.push_back(labels[j]);
            if (keys) emit_key_.push_back((*keys)[j]);
        }
        step_rows(keys != nullptr);
    }

    // The waiting steps of rows[:n] computed (those of one sequence once; a sequence computed before is
    // copied from the cache).
    void ensure(const int64_t* rows, int64_t n) {
        ensure(rows, n, 0, [this]() -> const std::vector<int64_t>& { return ready_; });
    }

    // The same; when it computes fewer than `min_rows` steps (but some), the waiting steps of the rows that
    // more() lists (likely asked for next) join them in its order up to `min_rows` (a product of a few rows
    // is bound by reading the weights: more rows cost little more).
    template <class More>
    void ensure(const int64_t* rows, int64_t n, int64_t min_rows, More&& more) {
        rows_.clear();
        emit_.clear();
        emit_key_.clear();
        same_.clear();
        pending_.clear();
        for (int64_t i = 0; i < n; ++i) take(rows[i]);
        const size_t want = static_cast<size_t>(std::max<int64_t>(min_rows, 0));
        if (!rows_.empty() && rows_.size() < want) {
            const std::vector<int64_t>& extra = more();
            for (size_t i = 0; i < extra.size() && rows_.size() < want; ++i) take(extra[i]);
        }
        step_rows(true);
    }

private:
    // Row j's waiting step into this batch of steps (from the cache, or after an earlier row of its sequence).
    void take(int64_t row) {
        const int j = static_cast<int>(row);
        if (j < 0 || j >= static_cast<int>(wait_.size()) || wait_[j] < 0) return;
        const int label = wait_[j];
        wait_[j] = -1;
        if (copy_cached(wait_key_[j], j)) return;
        const auto first = pending_.emplace(wait_key_[j], j);
        if (!first.second) {  // the same sequence as an earlier row here: copied after it
            same_.emplace_back(j, first.first->second);
            return;
        }
        rows_.push_back(j);
        emit_.push_back(label);
        emit_key_.push_back(wait_key_[j]);
    }

    // One step of the rows rows_ on emit_ (in place), the rows of same_ copied from their first, remembered.
    void step_rows(bool remember_them) {
        const size_t S = static_cast<size_t>(n_.L) * n_.P, H = n_.H;
        predict_rows(n_, rows_, emit_, h_.data(), c_.data(), g_.data(), X_, Gt_, Hg_);
        for (const auto& [j, src] : same_) {
            std::memcpy(&h_[j * S], &h_[src * S], sizeof(float) * S);
            std::memcpy(&c_[j * S], &c_[src * S], sizeof(float) * S);
            std::memcpy(&g_[j * H], &g_[src * H], sizeof(float) * H);
        }
        if (remember_them)
            for (size_t i = 0; i < rows_.size(); ++i) remember(emit_key_[i], static_cast<size_t>(rows_[i]));
    }

    static constexpr size_t kCacheFloats = size_t(1) << 23;  // 32 MB

    bool copy_cached(const SeqKey& key, int j) {
        const auto it = cache_.find(key);
        if (it == cache_.end()) return false;
        const size_t S = static_cast<size_t>(n_.L) * n_.P, H = n_.H;
        const float* e = &cached_[it->second];
        std::memcpy(&h_[j * S], e, sizeof(float) * S);
        std::memcpy(&c_[j * S], e + S, sizeof(float) * S);
        std::memcpy(&g_[j * H], e + 2 * S, sizeof(float) * H);
        return true;
    }

    void remember(const SeqKey& key, size_t j) {
        const size_t S = static_cast<size_t>(n_.L) * n_.P, H = n_.H;
        if (cached_.size() + 2 * S + H > kCacheFloats) return;
        if (!cache_.emplace(key, cached_.size()).second) return;
        cached_.insert(cached_.end(), &h_[j * S], &h_[j * S] + S);
        cached_.insert(cached_.end(), &c_[j * S], &c_[j * S] + S);
        cached_.insert(cached_.end(), &g_[j * H], &g_[j * H] + H);
    }

    Net n_;
    int blank_;
    std::vector<float> h_, c_, g_, mh_, mc_, mg_, X_, Gt_, Hg_, cached_;
    std::vector<int> rows_, emit_, moved_;
    std::vector<int64_t> ready_;
    std::vector<int> wait_, mwait_;         // per row: the label of its waiting step (-1: none)
    std::vector<SeqKey> wait_key_, mkey_, emit_key_;   //   and the sequence it makes
    std::vector<std::pair<size_t, size_t>> same_;  // (row, the earlier row of this step with its sequence)
    std::unordered_map<SeqKey, size_t, SeqKeyHash> cache_;
    std::unordered_map<SeqKey, size_t, SeqKeyHash> pending_;
};

// icefall's stateless decoder: per row its context of C labels; outputs cached per context.
struct StatelessNet {
    const float* emb; int E; const float* convw; const float* convb; int G; int C;
    const float* wp; const float* bp; int H;
};

class StatelessPred {
public:
    StatelessPred(const StatelessNet& n, const int* start_ctx)
        : n_(n), start_(start_ctx), x_(static_cast<size_t>(n.C) * n.E) {}

    // `rows` rows with the start context.
    void start(int rows) {
        ctx_.resize(static_cast<size_t>(rows) * n_.C);
        for (int r = 0; r < rows; ++r) std::memcpy(&ctx_[static_cast<size_t>(r) * n_.C], start_, sizeof(int) * n_.C);
        resolve(rows);
    }

    const float* g(int row) const { return &out_[static_cast<size_t>(at_[row]) * n_.H]; }

    // `rows` rows with the contexts ctx [rows, C] (a carried search).
    void load(int rows, const int* ctx) {
        ctx_.assign(ctx, ctx + static_cast<size_t>(rows) * n_.C);
        resolve(rows);
    }

    // The rows' contexts into ctx [rows, C].
    void save(int* ctx) const { std::memcpy(ctx, ctx_.data(), sizeof(int) * ctx_.size()); }

    // Every row's output is computed by advance (its context's, once): nothing waits.
    void ensure(const int64_t* /*rows*/, int64_t /*n*/) {}
    template <class More>
    void ensure(const int64_t* /*rows*/, int64_t /*n*/, int64_t /*min_rows*/, More&& /*more*/) {}

    // New row j continues row parents[j]; labels[j] >= 0 shifts that label into its context (outputs are
    // cached per context already: `keys` is not needed).
    void advance(const std::vector<int>& parents, const std::vector<int>& labels,
                 const std::vector<SeqKey>* /*keys*/ = nullptr, bool /*defer*/ = false) {
        const int R = static_cast<int>(parents.size()), C = n_.C;
        next_.resize(static_cast<size_t>(R) * C);
        for (int j = 0; j < R; ++j) {
            const int* src = &ctx_[static_cast<size_t>(parents[j]) * C];
            int* dst = &next_[static_cast<size_t>(j) * C];
            if (labels[j] < 0) {
                std::memcpy(dst, src, sizeof(int) * C);
                continue;
            }
            for (int k = 0; k + 1 < C; ++k) dst[k] = src[k + 1];
            dst[C - 1] = labels[j];
        }
        ctx_.swap(next_);
        resolve(R);
    }

private:
    static uint64_t hash(const int* ctx, int C) {
        uint64_t k = 0x84222325cbf29ce4ULL;
        for (int i = 0; i < C; ++i) k = extend_key(k, ctx[i] + 1);
        return k;
    }

    // at_[r]: the cache entry of row r's context; the missing contexts computed as one projection.
    void resolve(int R) {
        const int C = n_.C, E = n_.E, H = n_.H;
        at_.resize(R);
        missing_.clear();
        for (int r = 0; r < R; ++r) {
            const int* ctx = &ctx_[static_cast<size_t>(r) * C];
            auto& bucket = index_[hash(ctx, C)];
            int found = -1;
            for (int e : bucket)
                if (std::memcmp(&keys_[static_cast<size_t>(e) * C], ctx, sizeof(int) * C) == 0) { found = e; break; }
            if (found < 0) {
                found = static_cast<int>(keys_.size() / C);
                keys_.insert(keys_.end(), ctx, ctx + C);
                bucket.push_back(found);
                missing_.push_back(found);
            }
            at_[r] = found;
        }
        const int M = static_cast<int>(missing_.size());
        if (M == 0) return;
        mid_.resize(static_cast<size_t>(M) * E);
        for (int m = 0; m < M; ++m)
            stateless_mid(&keys_[static_cast<size_t>(missing_[m]) * C], C, n_.emb, E, n_.convw, n_.convb, n_.G, x_,
                                &mid_[static_cast<size_t>(m) * E]);
        out_.resize(static_cast<size_t>(keys_.size() / C) * H);  // missing entries are the last M
        matmat(n_.wp, n_.bp, mid_.data(), M, H, E, &out_[static_cast<size_t>(missing_[0]) * H]);
    }

    StatelessNet n_;
    const int* start_;  // [C]
    std::vector<float> x_, mid_, out_;  // out_ [entries, H]
    std::vector<int> ctx_, next_, at_, keys_, missing_;  // keys_ [entries, C]
    std::unordered_map<uint64_t, std::vector<int>> index_;
};

}  // namespace asrd
