// The CTC prefix beam search on the native engine: the frame loop of asrdecode.ctc.beam._Stepper.core,
// one utterance at a time, reading and writing the CTCBeamState arrays in place.
//
// Same algorithm, same arithmetic order as the tensor step (see ctc/beam.py): stays, extensions
// (the repeated last token only from paths ending in blank), merging of an extension into the
// hypothesis it equals (found by parent hash), the `peak` / relink timestamp rule, the candidate
// tokens (all, the token_beam best, or the 2*beam best without fusion), the beam threshold.
// Candidates are indexed as in the tensor step ([stays K | extensions K x M]); the K best are
// kept, higher score first, ties to the lower index.
#include <cstring>
#include <string>

#include "engine.h"

namespace {

using asrd::Automaton;

// One fusion model: an automaton read natively, or rows computed by the driver for this frame.
struct FusionModelDesc {
  int64_t kind;          // 0: automaton, 1: rows
  double weight;
  int64_t nonpositive;   // every score <= 0 (lets a candidate be rejected before its LM look-up)
  Automaton automaton;
  const void* rows_scores;  // kind 1: [B*K, V] in the emissions' dtype
  const int64_t* rows_next; // kind 1: [B*K, V]
};

struct CtcBeamArgs {
  int64_t batch, beam, vocab, frames;  // B, K, V, T (frames of x)
  int64_t blank;
  int64_t is_double;                   // emissions / state dtype: 0 float32, 1 float64
  int64_t num_tokens;                  // M candidate tokens per frame; 0: the whole vocabulary
  int64_t merge_all;                   // merge children into stays even when their token is not a candidate
  int64_t num_models;
  int64_t t_begin, t_end;              // frames to run
  double beta, threshold;
  const void* x;                       // [B, T, V]
  const int64_t* lengths;              // [B] frames of each utterance in x
  void* p_b;                           // [B, K] dtype
  void* p_nb;
  void* fscore;
  void* length;
  void* peak;
  int64_t* last;                       // [B, K]
  int64_t* hash;
  int64_t* parent_hash;
  int64_t* fstates;                    // [B, K, num_models]
  int64_t* tok_out;                    // [t_end - t_begin, B, K]
  int64_t* par_out;
  const FusionModelDesc* models;
};

struct Cand {
  int64_t src;  // slot of the hypothesis it comes from
  int64_t tok;  // -1: a stay, else the appended token
};

template <typename T>
class CtcBeam {
 public:
  explicit CtcBeam(const CtcBeamArgs& a) : a_(a), K_(a.beam), V_(a.vocab), NM_(a.num_models) {
    const size_t K = static_cast<size_t>(K_);
    p_tot_.resize(K); e_last_.resize(K); bonus_.resize(K); bonus1_.resize(K);
    stay_b_.resize(K); stay_nb_.resize(K); stay_peak_.resize(K);
    later_peak_.resize(K); parent_.resize(K); has_parent_.resize(K);
    o_pb_.resize(K); o_pnb_.resize(K); o_fs_.resize(K); o_len_.resize(K); o_last_.resize(K);
    o_hash_.resize(K); o_phash_.resize(K); o_fst_.resize(K * static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    child_mark_.assign(static_cast<size_t>(V_), -1);
    cand_mark_.assign(static_cast<size_t>(V_), -1);
    sc_.resize(static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    nx_.resize(static_cast<size_t>(std::max<int64_t>(NM_, 1)));
    bound_ok_ = true;
    for (int64_t i = 0; i < NM_; ++i)
      bound_ok_ = bound_ok_ && a.models[i].kind == 0 && a.models[i].nonpositive && a.models[i].weight >= 0.0;
    beta_ = static_cast<T>(a.beta);
    thr_ = static_cast<T>(a.threshold);
    for (int64_t i = 0; i < NM_; ++i) w_.push_back(static_cast<T>(a.models[i].weight));
  }

  // Runs frames [t_begin, t_end) of every utterance; returns an error message or "".
  std::string run() {
    const int64_t B = a_.batch;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = a_.t_begin; t < a_.t_end; ++t) {
        int64_t* tok_rec = a_.tok_out + ((t - a_.t_begin) * B + b) * K_;
        int64_t* par_rec = a_.par_out + ((t - a_.t_begin) * B + b) * K_;
        if (t >= a_.lengths[b]) {  // this utterance has no such frame: state kept
          for (int64_t j = 0; j < K_; ++j) { tok_rec[j] = -1; par_rec[j] = j; }
          continue;
        }
        const T* e = static_cast<const T*>(a_.x) + (b * a_.frames + t) * V_;
        std::string err = step(b, e, tok_rec, par_rec);
        if (!err.empty()) return err;
      }
    }
    return "";
  }

 private:
  // Score of token `tok` for slot `j` of utterance `b` for model i; false on an invalid state.
  bool model_score(int64_t i, int64_t b, int64_t j, int64_t state, int64_t tok, T* score, int64_t* next) {
    const FusionModelDesc& m = a_.models[i];
    if (m.kind == 0) {
      float s;
      if (!asrd::automaton_score(m.automaton, state, tok, &s, next)) return false;
      *score = static_cast<T>(s);
      return true;
    }
    const int64_t row = (b * K_ + j) * V_ + tok;
    *score = static_cast<const T*>(m.rows_scores)[row];
    *next = m.rows_next[row];
    return true;
  }

  std::string step(int64_t b, const T* e, int64_t* tok_rec, int64_t* par_rec) {
    const T ninf = asrd::neg_inf<T>();
    T* p_b = static_cast<T*>(a_.p_b) + b * K_;
    T* p_nb = static_cast<T*>(a_.p_nb) + b * K_;
    T* fscore = static_cast<T*>(a_.fscore) + b * K_;
    T* length = static_cast<T*>(a_.length) + b * K_;
    T* peak = static_cast<T*>(a_.peak) + b * K_;
    int64_t* last = a_.last + b * K_;
    int64_t* hsh = a_.hash + b * K_;
    int64_t* phash = a_.parent_hash + b * K_;
    int64_t* fst = a_.fstates + b * K_ * NM_;
    ++stamp_;

    // Candidate tokens of this frame.
    const bool all_tokens = a_.num_tokens <= 0;
    int64_t M;
    if (all_tokens) {
      M = V_;
    } else {
      asrd::top_tokens(e, V_, a_.blank, a_.num_tokens, scratch_, toks_);
      M = static_cast<int64_t>(toks_.size());
      for (int64_t m = 0; m < M; ++m) cand_mark_[static_cast<size_t>(toks_[m])] = stamp_;
    }
    // Per-slot quantities.
    for (int64_t j = 0; j < K_; ++j) {
      p_tot_[j] = asrd::log_add_exp(p_b[j], p_nb[j]);
      e_last_[j] = e[last[j] < 0 ? 0 : last[j]];
      if (beta_ != T(0)) {
        bonus_[j] = fscore[j] + beta_ * length[j];
        bonus1_[j] = bonus_[j] + beta_;
      } else {
        bonus_[j] = fscore[j];
        bonus1_[j] = fscore[j];
      }
    }
    // Parent of each hypothesis in the beam (first slot whose hash is its parent hash).
    for (int64_t i = 0; i < K_; ++i) {
      parent_[i] = 0;
      has_parent_[i] = 0;
      for (int64_t j = 0; j < K_; ++j) {
        if (hsh[j] == phash[i]) { parent_[i] = j; has_parent_[i] = 1; break; }
      }
    }
    // Stays (with merged arrivals of children already in the beam).
    heap_.reset(K_);
    const T e_blank = e[a_.blank];
    for (int64_t i = 0; i < K_; ++i) {
      const bool last_in = all_tokens ? last[i] >= 0 : (last[i] >= 0 && cand_mark_[static_cast<size_t>(last[i])] == stamp_);
      const bool child_in = has_parent_[i] && last_in;
      const bool merge = a_.merge_all ? bool(has_parent_[i]) : child_in;
      T sb = p_tot_[i] + e_blank;
      T snb = p_nb[i] + e_last_[i];
      T pk = peak[i];
      later_peak_[i] = 0;
      if (merge) {
        const int64_t j = parent_[i];
        const T par_from = last[j] == last[i] ? p_b[j] : p_tot_[j];
        const T arrival = par_from + e_last_[i];
        snb = asrd::log_add_exp(snb, arrival);
        if (arrival > pk) { pk = arrival; later_peak_[i] = 1; }
      }
      stay_b_[i] = sb;
      stay_nb_[i] = snb;
      stay_peak_[i] = pk;
      const T v = asrd::log_add_exp(sb, snb) + bonus_[i];
      if (v > ninf) heap_.push(v, i, Cand{i, -1});
    }
    // Extensions.
    for (int64_t j = 0; j < K_; ++j) {
      if (!(p_tot_[j] > ninf)) continue;
      ++stamp_child_;
      for (int64_t i = 0; i < K_; ++i)
        if (has_parent_[i] && parent_[i] == j && last[i] >= 0) child_mark_[static_cast<size_t>(last[i])] = stamp_child_;
      const T base = p_tot_[j] + bonus1_[j];
      const int64_t* fs_j = fst + j * NM_;
      for (int64_t m = 0; m < M; ++m) {
        const int64_t tok = all_tokens ? m : toks_[m];
        if (tok == a_.blank || child_mark_[static_cast<size_t>(tok)] == stamp_child_) continue;
        const bool own = tok == last[j];
        const T ac = own ? (p_b[j] + e_last_[j]) + bonus1_[j] : base + e[tok];
        if (!(ac > ninf)) continue;
        const int64_t index = K_ + j * M + m;
        if (bound_ok_ && !heap_.admits(ac, index)) continue;  // fusion only lowers it
        T v = ac;
        if (NM_) {
          if (own) {
            T lm = T(0);
            for (int64_t k = 0; k < NM_; ++k) {
              T s;
              int64_t nx;
              if (!model_score(k, b, j, fs_j[k], tok, &s, &nx)) return bad_state(k, fs_j[k]);
              lm = k == 0 ? s * w_[k] : lm + s * w_[k];
            }
            v = ac + lm;
          } else {
            for (int64_t k = 0; k < NM_; ++k) {
              T s;
              int64_t nx;
              if (!model_score(k, b, j, fs_j[k], tok, &s, &nx)) return bad_state(k, fs_j[k]);
              v = std::fma(w_[k], s, v);
            }
          }
        }
        if (v > ninf) heap_.push(v, index, Cand{j, tok});
      }
    }
    // Keep copies of the old state: the new one is written over it.
    for (int64_t j = 0; j < K_; ++j) {
      o_pb_[j] = p_b[j]; o_pnb_[j] = p_nb[j]; o_fs_[j] = fscore[j]; o_len_[j] = length[j];
      o_last_[j] = last[j]; o_hash_[j] = hsh[j]; o_phash_[j] = phash[j];
    }
    for (int64_t q = 0; q < K_ * NM_; ++q) o_fst_[q] = fst[q];
    auto& best = heap_.sorted();
    const int64_t n_best = static_cast<int64_t>(best.size());
    T floor = n_best ? best[0].value - thr_ : ninf;
    const T lowest = std::numeric_limits<T>::lowest();
    if (!(floor >= lowest)) floor = lowest;
    for (int64_t k = 0; k < K_; ++k) {
      const bool filled = k < n_best;
      const int64_t src = filled ? best[k].payload.src : k;
      const int64_t tok = filled ? best[k].payload.tok : -1;
      const bool drop = !filled || best[k].value < floor;
      int64_t* fs_k = fst + k * NM_;
      const int64_t* fs_src = o_fst_.data() + src * NM_;
      if (tok >= 0) {  // extension
        const T ext_ac = (o_last_[src] == tok ? o_pb_[src] : p_tot_[src]) + e[tok];
        T lm = T(0);
        for (int64_t m = 0; m < NM_; ++m) {
          T s;
          int64_t nx;
          if (!model_score(m, b, src, fs_src[m], tok, &s, &nx)) return bad_state(m, fs_src[m]);
          lm = m == 0 ? s * w_[m] : lm + s * w_[m];
          nx_[static_cast<size_t>(m)] = nx;
        }
        p_b[k] = ninf;
        p_nb[k] = drop ? ninf : ext_ac;
        fscore[k] = NM_ ? o_fs_[src] + lm : o_fs_[src];
        length[k] = o_len_[src] + T(1);
        last[k] = tok;
        hsh[k] = drop ? -1 : asrd::extend_hash(o_hash_[src], tok);
        phash[k] = drop ? -2 : o_hash_[src];
        peak[k] = ext_ac;
        for (int64_t m = 0; m < NM_; ++m) fs_k[m] = nx_[static_cast<size_t>(m)];
        tok_rec[k] = tok;
        par_rec[k] = src;
      } else {  // stay
        const bool relink = later_peak_[src] != 0;
        p_b[k] = drop ? ninf : stay_b_[src];
        p_nb[k] = drop ? ninf : stay_nb_[src];
        fscore[k] = o_fs_[src];
        length[k] = o_len_[src];
        last[k] = o_last_[src];
        hsh[k] = drop ? -1 : o_hash_[src];
        phash[k] = drop ? -2 : o_phash_[src];
        peak[k] = stay_peak_[src];
        if (fs_k != fs_src)
          for (int64_t m = 0; m < NM_; ++m) fs_k[m] = fs_src[m];
        tok_rec[k] = relink ? o_last_[src] : -1;
        par_rec[k] = relink ? parent_[src] : src;
      }
    }
    return "";
  }

  std::string bad_state(int64_t model, int64_t state) {
    return "fusion model " + std::to_string(model) + " has state " + std::to_string(state) +
           " outside its automaton";
  }

  const CtcBeamArgs& a_;
  int64_t K_, V_, NM_;
  T beta_, thr_;
  std::vector<T> w_;
  bool bound_ok_;
  int64_t stamp_ = 0, stamp_child_ = 0;
  std::vector<T> p_tot_, e_last_, bonus_, bonus1_, stay_b_, stay_nb_, stay_peak_;
  std::vector<char> later_peak_, has_parent_;
  std::vector<int64_t> parent_;
  std::vector<T> o_pb_, o_pnb_, o_fs_, o_len_;
  std::vector<int64_t> o_last_, o_hash_, o_phash_, o_fst_;
  std::vector<int64_t> child_mark_, cand_mark_, scratch_, toks_;
  std::vector<T> sc_;
  std::vector<int64_t> nx_;
  asrd::TopK<T, Cand> heap_;
};

}  // namespace

extern "C" {

// Version of the C ABI below (the Python side checks it).
int asrd_abi_version() { return 1; }

// Runs frames [t_begin, t_end) of the CTC prefix beam search in place on the state arrays.
// Returns 0, or 1 with a message in `err` (at most err_len bytes, NUL-terminated).
int asrd_ctc_beam_run(const CtcBeamArgs* args, char* err, int64_t err_len) {
  std::string msg;
  try {
    if (args->is_double) {
      CtcBeam<double> s(*args);
      msg = s.run();
    } else {
      CtcBeam<float> s(*args);
      msg = s.run();
    }
  } catch (const std::exception& ex) {
    msg = std::string("native engine: ") + ex.what();
  }
  if (msg.empty()) return 0;
  if (err && err_len > 0) {
    std::strncpy(err, msg.c_str(), static_cast<size_t>(err_len - 1));
    err[err_len - 1] = '\0';
  }
  return 1;
}

}  // extern "C"
