// A whole ALSD++ / AES++ / WIND beam search of asrdecode.transducer.beam in one call per batch, with the
// prediction and joint networks computed here: the search steps are transducer_beam_step.h's and
// transducer_wind_step.h's (the steps the per-step engine runs between torch network calls), the networks
// are transducer_pred.h's prediction networks (LSTM, icefall's stateless decoder) and dense.h's joint
// pieces (the kernels the native greedy and modified beam searches run), the fusion models (token n-gram
// LM, boosting tree, word LM) are read natively (transducer_common.h's Fusion). Each step: the joint of
// the expanding slots (one matrix product; WIND: of the window frames the step reads, a product per
// round), the step, the prediction-network rows moved to their hypotheses and advanced on the emitting
// ones (WIND: when the hypothesis is popped). At
// the end every slot's final score (the fusion end-of-sentence scores added) and its labels; the caller
// ranks them as BeamLoop.results does. A stream's chunk (asrd_transducer_beam_chunk) runs the same search from
// a carried state and gives the state back (hypotheses, prediction-network rows, fusion states, the chunk's
// tree records) instead of the results.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dense.h"
#include "guard.h"
#include "transducer_beam_step.h"
#include "transducer_pred.h"
#include "transducer_wind_step.h"

namespace {

using asrd::FusionDesc;
using asrd::TransducerBeamArgs;
using asrd::TransducerChunkArgs;
using asrd::TransducerSearchArgs;
using asrd::WindArgs;

// What the arguments must satisfy before anything is read (shapes, ids, settings).
std::string check_args(const TransducerSearchArgs& a) {
  if (a.batch < 0 || a.beam < 1 || a.net.vocab < 1 || a.num_durations < 1 || a.frames < 0 || a.net.hidden < 1)
    return "transducer search: batch, beam, vocab, durations, frames or hidden size out of range";
  if (a.net.outputs != a.net.vocab + (a.tdt ? a.num_durations : 0))
    return "transducer search: the joint has " + std::to_string(a.net.outputs) + " outputs, expected vocab" +
           (a.tdt ? " + durations" : "");
  if (a.blank < 0 || a.blank >= a.net.vocab) return "transducer search: blank id out of range";
  if (a.fold < -1 || a.fold >= a.net.vocab) return "transducer search: <unk> id out of range";
  if (a.capacity < 0) return "transducer search: capacity out of range";
  if (a.net.act != 0 && a.net.act != 1) return "transducer search: joint activation must be 0 (tanh) or 1 (relu)";
  if (a.num_models < 0 || a.pack < 1) return "transducer search: fusion models or data packing out of range";
  for (int64_t i = 0; i < a.num_models; ++i)
    if (a.models[i].kind != 0 && a.models[i].kind != 2)
      return "transducer search: fusion model " + std::to_string(i) + " is not read natively";
  for (int64_t b = 0; b < a.batch; ++b)
    if (a.lengths[b] < 0 || a.lengths[b] > a.frames) return "transducer search: lengths must be in 0..frames";
  for (int64_t d = 0; d < a.num_durations; ++d)
    if (a.durations[d] < 0) return "transducer search: durations must be >= 0";
  if (a.wind && (a.window < 1 || a.tdt || a.aes)) return "transducer search: WIND needs an RNN-T and a window >= 1";
  if (a.net.kind == 0) {
    if (a.net.pred_dim < 1 || a.net.pred_layers < 1) return "transducer search: LSTM width and layers must be >= 1";
  } else if (a.net.kind == 1) {
    if (a.net.embed_dim < 1 || a.net.groups < 1 || a.net.embed_dim % a.net.groups != 0 || a.net.context < 1)
      return "transducer search: stateless decoder sizes out of range";
    for (int64_t c = 0; c < a.net.context; ++c)
      if (a.net.start_ctx[c] < -1 || a.net.start_ctx[c] >= a.net.vocab)
        return "transducer search: start context out of range";
  } else {
    return "transducer search: net.kind must be 0 (LSTM) or 1 (stateless)";
  }
  return "";
}

// What a chunk's carried state must satisfy (the arrays it names; frames, symbol and label counts within
// +-2^40, a live hypothesis's frame >= 0 and last label in [0, V), contexts and offsets in range).
std::string check_chunk(const TransducerChunkArgs& c) {
  const TransducerSearchArgs& a = c.search;
  const int64_t S = a.wind ? (a.window + 1) * a.beam : a.beam, N = a.batch * S;
  const bool lstm = a.net.kind == 0;
  if (!c.offset || !c.final_chunk || !c.score || !c.time || !c.symbols || !c.hash || !c.nlabels || !c.last ||
      (a.num_models && !c.lm_states) || !c.pred_g || (lstm && (!c.pred_h || !c.pred_c)) || (!lstm && !c.pred_ctx) ||
      c.record_capacity < 0 || (c.record_capacity && !c.records))
    return "transducer chunk: a state array is missing";
  constexpr int64_t kBound = int64_t(1) << 40;  // the step adds to these (a removed slot's too): no overflow
  const auto out_of_bound = [](int64_t v) { return v < -kBound || v > kBound; };
  for (int64_t b = 0; b < a.batch; ++b)
    if (c.offset[b] < 0 || c.offset[b] > kBound) return "transducer chunk: offset must be in [0, 2^40]";
  if (!c.carried) return "";
  for (int64_t r = 0; r < N; ++r) {
    if (out_of_bound(c.time[r]) || out_of_bound(c.symbols[r]) || out_of_bound(c.nlabels[r]))
      return "transducer chunk: carried frames, symbol and label counts must be within +-2^40";
    if (!(c.score[r] > asrd::neg_inf<float>())) continue;  // a removed hypothesis: its frame and label unread
    if (c.time[r] < 0) return "transducer chunk: carried frames must be >= 0";
    if (c.last[r] < 0 || c.last[r] >= a.net.vocab) return "transducer chunk: carried last label out of range";
    if (!asrd::valid_hash(c.hash[r])) return "transducer chunk: carried hash is not a prefix hash";
  }
  if (!lstm)
    for (int64_t i = 0; i < N * a.net.context; ++i)
      if (c.pred_ctx[i] < -1 || c.pred_ctx[i] >= a.net.vocab) return "transducer chunk: carried context out of range";
  return "";
}

// The search of one batch on prediction network `pred` (LstmPred or StatelessPred); with `chunk`, one chunk of
// a stream (its carried state read and written back).
template <class Pred>
class Search {
 public:
  Search(const TransducerSearchArgs& a, Pred& pred, const TransducerChunkArgs* chunk = nullptr)
      : a_(a), c_(chunk), pred_(pred), S_(a.wind ? (a.window + 1) * a.beam : a.beam), N_(a.batch * S_) {}

  std::string run() {
    init();
    if (a_.wind) return run_wind();
    asrd::tbeam::TransducerBeamStep<float> step(s_);
    if (c_)  // a chunk's first step expands what the carried hypotheses may expand
      for (int64_t b = 0; b < a_.batch; ++b) step.update_active(b);
    int64_t n = asrd::tbeam::joint_rows(a_.batch, a_.beam, a_.frames, time_.data(), active_.data(),
                                        frame_rows_.data(), joint_rows_.data(), logit_pos_.data());
    start_networks();
    steps_ = 0;
    while (n > 0) {
      joint(n);
      int64_t* rec = next_records();
      s_.tok_out = rec;
      s_.par_out = rec + N_;
      s_.dat_out = rec + 2 * N_;
      s_.logits = logits_.data();
      s_.logit_rows = n;
      const std::string err = step.run();
      if (!err.empty()) return err;
      const bool go_on = after_step();
      n = counts_[0];
      if (!go_on) break;
    }
    return end_search();
  }

 private:
  // WIND: per step the popped frame lists' joint rows (twind::wind_pop), the step, the networks as above.
  std::string run_wind() {
    const int64_t B = a_.batch, KW = a_.beam * a_.window;
    std::vector<uint8_t> active(static_cast<size_t>(B));
    std::vector<int64_t> tmin(static_cast<size_t>(B)), row_of(static_cast<size_t>(B * KW)),
        enc_rows(static_cast<size_t>(B * KW)), dec_rows(static_cast<size_t>(B * KW));
    WindArgs w{};
    w.batch = B;
    w.beam = a_.beam;
    w.vocab = a_.net.vocab;
    w.window = a_.window;
    w.frames = a_.frames;
    w.blank = a_.blank;
    w.early = a_.early;
    w.lm_weighted = a_.lm_weighted;
    w.max_symbols = a_.max_symbols;
    w.num_models = a_.num_models;
    w.is_double = 0;
    w.lam = a_.lam;
    w.beta = a_.beta;
    w.logit_cols = a_.net.outputs;
    w.lengths = a_.lengths;
    w.offset = offset_.data();
    w.final_chunk = final_.data();
    w.score = score_.data();
    w.time = time_.data();
    w.symbols = sym_.data();
    w.hash = hash_.data();
    w.nlabels = nl_.data();
    w.last = last_.data();
    w.lm_states = lm_.data();
    w.active = active.data();
    w.tmin = tmin.data();
    w.row_of = row_of.data();
    w.enc_rows = enc_rows.data();
    w.dec_rows = dec_rows.data();
    w.parent_flat = parent_flat_.data();
    w.emitted = emitted_.data();
    w.labels = labels64_.data();
    w.emit_rows = emit_rows_.data();
    w.counts = counts_;
    w.models = a_.models;
    w.has_gamma = a_.has_gamma;
    w.gamma = a_.gamma;
    int64_t stepping = 0;
    for (int64_t b = 0; b < B; ++b) {
      asrd::twind::update_active(w, b);
      stepping += active[static_cast<size_t>(b)];
    }
    start_networks();
    // the step asks for the joint of the window frames it reads (a_.wind == 2: all of them)
    asrd::twind::WindStep<float> step(w, [this](int64_t m, const int64_t* enc, const int64_t* dec) {
      // the prediction-network steps of the popped hypotheses that waited (with those of the next frames'
      // hypotheses, up to kRoundRows rows: a product of a few rows costs about as much)
      pred_.ensure(dec, m, asrd::twind::kRoundRows, [this]() -> const std::vector<int64_t>& { return next_rows(); });
      std::copy(enc, enc + m, frame_rows_.begin());
      std::copy(dec, dec + m, joint_rows_.begin());
      joint(m);
      return static_cast<const float*>(logits_.data());
    }, a_.wind == 2);
    steps_ = 0;
    while (stepping > 0) {
      asrd::twind::wind_pop<float>(w);
      int64_t* rec = next_records();
      w.tok_out = rec;
      w.par_out = rec + N_;
      w.dat_out = rec + 2 * N_;
      const std::string err = step.run();
      if (!err.empty()) return err;
      const bool go_on = after_step();
      stepping = counts_[0];
      if (!go_on) break;
    }
    return end_search();
  }

  // Room for one more step's tree records [3, N] (tokens, parents, data): their start.
  int64_t* next_records() {
    tree_.resize(tree_.size() + 3 * static_cast<size_t>(N_));
    return tree_.data() + 3 * static_cast<size_t>(N_) * static_cast<size_t>(steps_);
  }

  // After a step: the network steps only for the hypotheses that emitted and survived merging; false when
  // the search stops (more labels on one frame than symbol_guard without a cap: counts[2]).
  bool after_step() {
    ++steps_;
    advance_networks();
    if (a_.max_symbols < 0 && runaway()) {
      a_.counts[2] = 1;
      return false;
    }
    return true;
  }

  // The search's end: its counts, then the chunk's state written back or the final hypotheses.
  std::string end_search() {
    a_.counts[0] = steps_;
    a_.counts[3] = joint_rows_read_;
    return c_ ? write_chunk() : finish();
  }

  // Every slot starts from the blank-primed state of one row, or (a carried chunk) from its carried rows.
  void start_networks() {
    if (N_ == 0) return;
    if (c_ && c_->carried) {
      load(pred_);
      return;
    }
    pred_.start(1);
    pred_.advance(std::vector<int>(static_cast<size_t>(N_), 0), std::vector<int>(static_cast<size_t>(N_), -1));
  }

  void load(asrd::LstmPred& p) { p.load(static_cast<int>(N_), c_->pred_h, c_->pred_c); }
  void load(asrd::StatelessPred& p) { p.load(static_cast<int>(N_), c_->pred_ctx); }
  void save(asrd::LstmPred& p) const { p.save(c_->pred_h, c_->pred_c); }
  void save(const asrd::StatelessPred& p) const { p.save(c_->pred_ctx); }

  // A chunk's end: the state written back and the steps' tree records (nothing when they do not fit:
  // counts[0] steps, the caller calls again with that room).
  std::string write_chunk() {
    const TransducerChunkArgs& c = *c_;
    a_.counts[1] = 0;
    if (steps_ > c.record_capacity) return "";
    const size_t N = static_cast<size_t>(N_), H = static_cast<size_t>(a_.net.hidden);
    std::copy(score_.begin(), score_.end(), c.score);
    std::copy(time_.begin(), time_.end(), c.time);
    std::copy(sym_.begin(), sym_.end(), c.symbols);
    std::copy(hash_.begin(), hash_.end(), c.hash);
    std::copy(nl_.begin(), nl_.end(), c.nlabels);
    std::copy(last_.begin(), last_.end(), c.last);
    if (a_.num_models) std::copy(lm_.begin(), lm_.end(), c.lm_states);
    std::copy(tree_.begin(), tree_.begin() + 3 * N * static_cast<size_t>(steps_), c.records);
    if (N_ == 0) return "";
    save(pred_);
    for (size_t r = 0; r < N; ++r) std::copy(pred_.g(static_cast<int>(r)), pred_.g(static_cast<int>(r)) + H, c.pred_g + r * H);
    return "";
  }

  // WIND: the rows of every hypothesis by its frame (earliest first, then the row): popped in this order.
  const std::vector<int64_t>& next_rows() {
    by_time_.clear();
    for (int64_t r = 0; r < N_; ++r)
      if (score_[static_cast<size_t>(r)] > asrd::neg_inf<float>()) by_time_.push_back(r);
    std::sort(by_time_.begin(), by_time_.end(), [this](int64_t x, int64_t y) {
      return time_[static_cast<size_t>(x)] != time_[static_cast<size_t>(y)]
                 ? time_[static_cast<size_t>(x)] < time_[static_cast<size_t>(y)] : x < y;
    });
    return by_time_;
  }

  // The network rows follow their parents and step on the emitting survivors (a label sequence computed
  // before is copied from the network's cache).
  void advance_networks() {
    for (int64_t r = 0; r < N_; ++r) {
      parents_[r] = static_cast<int>(parent_flat_[r]);
      const bool step_it = emitted_[r] && score_[static_cast<size_t>(r)] > asrd::neg_inf<float>();
      labels_[r] = step_it ? static_cast<int>(labels64_[r]) : -1;
      keys_[r] = asrd::SeqKey{hash_[r], nl_[r], labels64_[r]};
    }
    pred_.advance(parents_, labels_, &keys_, a_.wind != 0);  // WIND: a step waits until its row is popped
  }

  void init() {
    const int64_t B = a_.batch, K = S_, M = a_.num_models;
    const size_t N = static_cast<size_t>(N_);
    score_.assign(N, asrd::neg_inf<float>());
    time_.assign(N, 0);
    sym_.assign(N, 0);
    hash_.assign(N, 0);  // EMPTY_HASH
    nl_.assign(N, 0);
    last_.assign(N, a_.blank);
    lm_.assign(a_.init_states, a_.init_states + N * static_cast<size_t>(M));
    active_.assign(N, 0);
    for (int64_t b = 0; b < B; ++b) {
      score_[static_cast<size_t>(b * K)] = 0.0f;
      active_[static_cast<size_t>(b * K)] = a_.lengths[b] > 0;
    }
    offset_.assign(static_cast<size_t>(B), 0);
    final_.assign(static_cast<size_t>(B), 1);
    if (c_) {
      offset_.assign(c_->offset, c_->offset + B);
      final_.assign(c_->final_chunk, c_->final_chunk + B);
    }
    if (c_ && c_->carried) {
      score_.assign(c_->score, c_->score + N);
      time_.assign(c_->time, c_->time + N);
      sym_.assign(c_->symbols, c_->symbols + N);
      hash_.assign(c_->hash, c_->hash + N);
      nl_.assign(c_->nlabels, c_->nlabels + N);
      last_.assign(c_->last, c_->last + N);
      if (M) lm_.assign(c_->lm_states, c_->lm_states + N * static_cast<size_t>(M));
    }
    for (auto* v : {&parent_flat_, &labels64_, &emit_rows_, &frame_rows_, &joint_rows_, &logit_pos_}) v->assign(N, 0);
    emitted_.assign(N, 0);
    parents_.assign(N, 0);
    labels_.assign(N, -1);
    keys_.assign(N, asrd::SeqKey{0, 0, 0});
    TransducerBeamArgs& s = s_;
    s = TransducerBeamArgs{};
    s.batch = B;
    s.beam = K;
    s.vocab = a_.net.vocab;
    s.num_durations = a_.num_durations;
    s.logit_stride = a_.net.outputs;
    s.logit_cols = a_.net.outputs;
    s.frames = a_.frames;
    s.blank = a_.blank;
    s.tdt = a_.tdt;
    s.aes = a_.aes;
    s.early = a_.early;
    s.lm_weighted = a_.lm_weighted;
    s.max_symbols = a_.max_symbols;
    s.num_models = M;
    s.is_double = 0;
    s.pack = a_.pack;
    s.lam = a_.lam;
    s.beta = a_.beta;
    s.durations = a_.durations;
    s.lengths = a_.lengths;
    s.offset = offset_.data();
    s.final_chunk = final_.data();
    s.score = score_.data();
    s.time = time_.data();
    s.symbols = sym_.data();
    s.hash = hash_.data();
    s.nlabels = nl_.data();
    s.last = last_.data();
    s.lm_states = lm_.data();
    s.active = active_.data();
    s.parent_flat = parent_flat_.data();
    s.emitted = emitted_.data();
    s.labels = labels64_.data();
    s.emit_rows = emit_rows_.data();
    s.frame_rows = frame_rows_.data();
    s.joint_rows = joint_rows_.data();
    s.logit_pos = logit_pos_.data();
    s.selected_ok = nullptr;
    s.counts = counts_;
    s.models = a_.models;
  }

  // logits_ [n, O]: the joint of the expanding slots joint_rows_[:n] at their frames frame_rows_[:n]
  // (<unk> folded into blank by max where asked, as fold_unk's "max").
  void joint(int64_t n) {
    const int64_t H = a_.net.hidden, O = a_.net.outputs;
    joint_rows_read_ += n;
    Z_.resize(static_cast<size_t>(n * H));
    for (int64_t i = 0; i < n; ++i)
      asrd::joint_hidden(a_.enc + frame_rows_[i] * H, pred_.g(static_cast<int>(joint_rows_[i])), static_cast<int>(H),
                         static_cast<int>(a_.net.act), &Z_[static_cast<size_t>(i * H)]);
    logits_.resize(static_cast<size_t>(n * O));
    asrd::matmat(a_.net.wout, a_.net.bout, Z_.data(), static_cast<int>(n), static_cast<int>(O), static_cast<int>(H),
                 logits_.data());
    if (a_.fold < 0 || a_.fold == a_.blank) return;
    for (int64_t i = 0; i < n; ++i) {
      float* lg = &logits_[static_cast<size_t>(i * O)];
      lg[a_.blank] = std::max(lg[a_.blank], lg[a_.fold]);
      lg[a_.fold] = -INFINITY;
    }
  }

  bool runaway() const {
    for (int64_t r = 0; r < N_; ++r)
      if (sym_[static_cast<size_t>(r)] > a_.symbol_guard) return true;
    return false;
  }

  // Weighted end-of-sentence score of row r's fusion states (FusionScorer.final's order and dtype).
  bool final_score(int64_t r, float* out) const {
    const int64_t M = a_.num_models;
    float total = 0.0f;
    for (int64_t m = 0; m < M; ++m) {
      const FusionDesc& d = a_.models[m];
      const int64_t state = lm_[static_cast<size_t>(r * M + m)];
      float f;
      if (d.kind == 0) {
        if (state < 0 || state >= d.automaton.num_states) return false;
        f = d.automaton.final_weight[state];
      } else if (!asrd::word_lm_final(*d.word, state, &f)) {
        return false;
      }
      const float term = asrd::weigh(f, static_cast<float>(d.weight));
      total = m == 0 ? term : total + term;
    }
    *out = total;
    return true;
  }

  // Every slot's final score (score + end-of-sentence scores, as BeamLoop.results adds them) and its labels
  // and data backtracked from the tree; the caller ranks them as the tensor engine does.
  std::string finish() {
    const int64_t B = a_.batch, K = S_;
    std::vector<int64_t> tok(static_cast<size_t>(steps_)), dat(tok.size());
    int64_t longest = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < K; ++k) {
        const int64_t r = b * K + k;
        float f = 0.0f;
        if (a_.num_models && !final_score(r, &f)) return asrd::invalid_fusion_state(b, k);
        const float s = a_.num_models ? score_[static_cast<size_t>(r)] + f : score_[static_cast<size_t>(r)];
        a_.out_score[r] = s;
        if (!(score_[static_cast<size_t>(r)] > asrd::neg_inf<float>())) {
          a_.out_len[r] = -1;
          continue;
        }
        const int64_t len = backtrack(tree_.data(), b, k, tok.data(), dat.data());
        if (len < 0) return "transducer search: the backpointer tree holds a parent slot out of range";
        a_.out_len[r] = len;
        longest = std::max(longest, len);
        if (len > a_.capacity) continue;
        std::copy(tok.begin(), tok.begin() + len, a_.out_tok + r * a_.capacity);
        std::copy(dat.begin(), dat.begin() + len, a_.out_dat + r * a_.capacity);
      }
    a_.counts[1] = longest;
    return "";
  }

  // asrd::backtrack_one over the tree's step-major records (tok, par, dat [B, K] per step).
  int64_t backtrack(const int64_t* tree, int64_t b, int64_t slot, int64_t* out_tok, int64_t* out_dat) const {
    const int64_t K = S_;
    int64_t n = 0, cur = slot;
    for (int64_t s = steps_ - 1; s >= 0; --s) {
      if (cur < 0 || cur >= K) return -1;
      const int64_t* rec = tree + 3 * N_ * s;
      const int64_t at = b * K + cur;
      if (rec[at] >= 0) {
        out_tok[n] = rec[at];
        out_dat[n] = rec[2 * N_ + at];
        ++n;
      }
      cur = rec[N_ + at];
    }
    std::reverse(out_tok, out_tok + n);
    std::reverse(out_dat, out_dat + n);
    return n;
  }

  const TransducerSearchArgs& a_;
  const TransducerChunkArgs* c_;
  Pred& pred_;
  const int64_t S_, N_;
  int64_t steps_ = 0, joint_rows_read_ = 0;
  TransducerBeamArgs s_{};
  int64_t counts_[2] = {0, 0};
  std::vector<float> score_, Z_, logits_;
  std::vector<int64_t> time_, sym_, hash_, nl_, last_, lm_, offset_, parent_flat_, labels64_, emit_rows_,
      frame_rows_, joint_rows_, logit_pos_, tree_, by_time_;
  std::vector<uint8_t> active_, final_, emitted_;
  std::vector<int> parents_, labels_;
  std::vector<asrd::SeqKey> keys_;
};

// The search of `a` (whole utterances), or with `chunk` one chunk of a stream.
std::string search(const TransducerSearchArgs& a, const TransducerChunkArgs* chunk = nullptr) {
  std::string err = check_args(a);
  if (err.empty() && chunk) err = check_chunk(*chunk);
  if (!err.empty()) return err;
  a.counts[0] = a.counts[1] = a.counts[2] = a.counts[3] = 0;
  const asrd::TransducerNet& t = a.net;
  const auto i = [](int64_t x) { return static_cast<int>(x); };
  if (t.kind == 0) {
    const asrd::Net n{t.table, t.whh0, i(t.pred_dim), i(t.pred_layers), t.wup, t.bup, t.wdec, t.bdec, i(t.hidden),
                      t.wout, t.bout, i(t.outputs), i(t.act)};
    asrd::LstmPred pred(n, i(a.blank));
    return Search<asrd::LstmPred>(a, pred, chunk).run();
  }
  const asrd::StatelessNet n{t.emb, i(t.embed_dim), t.convw, t.convb, i(t.groups), i(t.context), t.wp, t.bp,
                             i(t.hidden)};
  asrd::StatelessPred pred(n, t.start_ctx);
  return Search<asrd::StatelessPred>(a, pred, chunk).run();
}

}  // namespace

extern "C" {

// A whole ALSD++ / AES++ search of a batch with the networks in C++ (see TransducerSearchArgs). Returns 0,
// or 1 with a message in `err` (guard.h's codes for an exception).
int asrd_transducer_beam_search(const TransducerSearchArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] { return search(*args); }, err, err_len);
}

// One chunk of a streaming ALSD++ / AES++ / WIND search with the networks in C++ (see TransducerChunkArgs):
// the carried state in, the state after the chunk and its steps' tree records out. Returns as above.
int asrd_transducer_beam_chunk(const TransducerChunkArgs* args, char* err, int64_t err_len) {
  return asrd::guard_message([&] { return search(args->search, args); }, err, err_len);
}

}  // extern "C"
