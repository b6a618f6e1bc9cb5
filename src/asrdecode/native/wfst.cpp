// WFST token passing (asrdecode.ctc.wfst.WFSTDecoder.advance) on the native engine.
//
// The same search as the tensor engine, utterance by utterance: an utterance's tokens never meet
// another's, and every rule of the tensor engine (beam, recombination, max-active, epsilon passes,
// lattice recording) depends only on the order of one utterance's tokens, which is kept. Per frame:
//   1. emitting expansion in (token, arc) order: score = ((token + arc) + am[lab]) + boost[word];
//      a running lower bound of the beam's cut-off (the best token expanded first) skips tokens and
//      arcs that cannot pass the beam (exact: float addition is monotone); a candidate scored -inf
//      (a masked class: probability 0) is no path and never a token, min_active or not;
//   2. beam (best - beam), recombination by state (highest score, earliest candidate on ties; the
//      survivors keep their candidates' order), max-active (score, then earlier first);
//   3. eps_depth epsilon passes: the new tokens' epsilon arcs are appended to the tokens, then
//      beam / recombination / max-active over all of them; the new survivors are the next frontier;
//   4. (lattice) the frame's candidate arcs between survivors within lattice_beam of the
//      destination are recorded, exactly as LatticeRecorder.close_step does.
// Backpointer history entries (prev, word, frame, token, start) are appended for the tokens that
// enter the token set. Outputs have data-dependent sizes: they stay in a Result object that Python
// sizes (asrd_wfst_sizes), copies out (asrd_wfst_copy) and frees (asrd_wfst_free).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <vector>

#include "abi.h"
#include "guard.h"

namespace {

using asrd::WfstArgs;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();


struct Tok {
  int32_t s;
  float score;
  int64_t hid;
  int64_t nid;
};

struct ECand {  // an emitting candidate
  int32_t tok, dst, word, lab2;
  float score, arc;
};

struct PCand {  // an epsilon candidate
  int32_t from, dst, word;
  float score, arc;  // arc = arc score + boost
};

struct Result {
  std::vector<int64_t> tok_ptr, tok_s, tok_hid, tok_nid;
  std::vector<float> tok_score;
  std::vector<int64_t> h_prev, h_word, h_frame, h_token;
  std::vector<uint8_t> h_start;
  std::vector<int64_t> node_b;
  std::vector<int64_t> a_src, a_dst, a_b, a_word, a_token, a_frame, a_step;
  std::vector<uint8_t> a_start, a_eps;
  std::vector<float> a_graph, a_am;
  int64_t steps = 0;
};

class Search {
 public:
  Search(const WfstArgs& a, Result& r)
      : a_(a), r_(r), at_(size_t(a.num_states), -1) {}

  void run() {
    r_.tok_ptr.push_back(0);
    for (int64_t b = 0; b < a_.batch; ++b) {
      utterance(b);
      r_.tok_ptr.push_back(int64_t(r_.tok_s.size()));
    }
  }

 private:
  const WfstArgs& a_;
  Result& r_;
  std::vector<int32_t> at_;  // state -> candidate / token index (-1: none); reset after each use
  std::vector<Tok> cur_, next_;
  std::vector<ECand> ec_, ec_lat_;
  std::vector<PCand> pc_, pc_lat_;
  std::vector<int32_t> pc_src_lat_;
  std::vector<int32_t> kept_, order_, touched_;
  std::vector<uint8_t> win_;
  std::vector<int32_t> mstate_, front_, front_now_;
  std::vector<Tok> merged_;
  std::vector<float> mscore_;

  int64_t hist_add(int64_t prev, int64_t word, int64_t frame, int64_t token, bool start) {
    r_.h_prev.push_back(prev);
    r_.h_word.push_back(word);
    r_.h_frame.push_back(frame);
    r_.h_token.push_back(token);
    r_.h_start.push_back(start ? 1 : 0);
    return a_.hist_base + int64_t(r_.h_prev.size()) - 1;
  }

  // Beam (with min_active: or among the best min_active), recombination by state, max-active over
  // (state, score)[n] in order: kept_ = the kept indices, ascending (WFSTDecoder._prune's rules).
  void prune(const int32_t* s, const float* sc, int32_t n) {
    kept_.clear();
    if (n == 0) return;
    float top = kNegInf;
    for (int32_t i = 0; i < n; ++i) top = std::max(top, sc[i]);
    const float cut = top - a_.beam;
    const bool relax = a_.min_active > 0;  // recombine everything first, the beam after
    win_.assign(size_t(n), 0);
    touched_.clear();
    for (int32_t i = 0; i < n; ++i) {
      if (!relax && !(sc[i] >= cut)) continue;
      int32_t& w = at_[size_t(s[i])];
      if (w < 0) {
        w = i;
        win_[size_t(i)] = 1;
        touched_.push_back(s[i]);
      } else if (sc[i] > sc[w]) {
        win_[size_t(w)] = 0;
        w = i;
        win_[size_t(i)] = 1;
      }
    }
    for (int32_t st : touched_) at_[size_t(st)] = -1;
    for (int32_t i = 0; i < n; ++i)
      if (win_[size_t(i)]) kept_.push_back(i);
    if (relax) {  // the beam's survivors are the best tokens: keep them, or the best min_active
      int64_t inside = 0;
      for (int32_t i : kept_) inside += sc[i] >= cut;
      if (inside < int64_t(kept_.size())) {
        auto better = [sc](int32_t x, int32_t y) { return sc[x] > sc[y] || (sc[x] == sc[y] && x < y); };
        const int64_t keep = std::max(inside, std::min(a_.min_active, int64_t(kept_.size())));
        order_ = kept_;
        if (keep < int64_t(order_.size())) {
          std::nth_element(order_.begin(), order_.begin() + (keep - 1), order_.end(), better);
          order_.resize(size_t(keep));
        }
        std::sort(order_.begin(), order_.end());
        kept_.swap(order_);
      }
    }
    if (int64_t(kept_.size()) > a_.max_active) {
      order_ = kept_;
      auto better = [sc](int32_t x, int32_t y) { return sc[x] > sc[y] || (sc[x] == sc[y] && x < y); };
      std::nth_element(order_.begin(), order_.begin() + (a_.max_active - 1), order_.end(), better);
      order_.resize(size_t(a_.max_active));
      std::sort(order_.begin(), order_.end());
      kept_.swap(order_);
    }
  }

  void utterance(int64_t b) {
    cur_.clear();
    for (int64_t i = a_.tok_ptr[b]; i < a_.tok_ptr[b + 1]; ++i)
      cur_.push_back(Tok{int32_t(a_.tok_s[i]), a_.tok_score[i], a_.tok_hid[i], a_.lattice ? a_.tok_nid[i] : -1});
    const int64_t len = a_.lengths[b];
    const float* boost = a_.boost ? a_.boost + b * a_.boost_width : nullptr;
    float bmax = 0.0f;
    if (boost)
      for (int64_t w = 0; w < a_.boost_width; ++w) bmax = std::max(bmax, boost[w]);
    for (int64_t t = 0; t < len && !cur_.empty(); ++t) {
      frame(b, t, a_.am + (b * a_.frames + t) * a_.vocab, boost, bmax);
      r_.steps = std::max(r_.steps, t + 1);
    }
    for (const Tok& k : cur_) {
      r_.tok_s.push_back(k.s);
      r_.tok_score.push_back(k.score);
      r_.tok_hid.push_back(k.hid);
      r_.tok_nid.push_back(k.nid);
    }
  }

  // One frame of utterance b: emitting expansion, recombination and max-active, the epsilon passes, the
  // lattice's nodes and arcs; cur_ becomes the frame's surviving tokens.
  void frame(int64_t b, int64_t t, const float* am, const float* boost, float bmax) {
    const int64_t fr = a_.offset[b] + t;
    emitting(am, boost, bmax);
    recombine(fr);
    epsilon_passes(fr, boost);
    if (a_.lattice) lattice_frame(b, t, fr, am, boost);
    cur_.swap(next_);
  }

  // 1. emitting expansion into ec_; the best token first gives a running lower bound of the best score.
  void emitting(const float* am, const float* boost, float bmax) {
    const float beam = a_.beam;
    const bool relax = a_.min_active > 0;
    float am_max = kNegInf;
    for (int64_t k = 0; k < a_.vocab; ++k) am_max = std::max(am_max, am[k]);
    auto score_of = [&](const Tok& k, const int32_t* row, float* arc) {
      float as;
      std::memcpy(&as, &row[3], sizeof(float));
      *arc = as;
      float sc = k.score + as;
      sc = sc + am[row[0] >> 1];
      if (boost) sc = sc + boost[row[2]];
      return sc;
    };
    float run = kNegInf;
    {
      size_t best = 0;
      for (size_t i = 1; i < cur_.size(); ++i)
        if (cur_[i].score > cur_[best].score) best = i;
      const Tok& k = cur_[best];
      for (int64_t e = a_.e_ptr[k.s]; e < a_.e_ptr[k.s + 1]; ++e) {
        float arc;
        run = std::max(run, score_of(k, a_.e_rows + 4 * e, &arc));
      }
    }
    ec_.clear();
    for (size_t i = 0; i < cur_.size(); ++i) {
      const Tok& k = cur_[i];
      const int64_t lo = a_.e_ptr[k.s], hi = a_.e_ptr[k.s + 1];
      if (lo == hi) continue;
      float bound = k.score + a_.e_max[k.s];
      bound = bound + am_max;
      bound = bound + bmax;
      if (!relax && bound < run - beam) continue;
      for (int64_t e = lo; e < hi; ++e) {
        const int32_t* row = a_.e_rows + 4 * e;
        float arc;
        const float sc = score_of(k, row, &arc);
        if (sc > run) run = sc;
        // a -inf score (a class of probability 0) is no path: never a token, whatever min_active says
        if (sc > kNegInf && (relax || sc >= run - beam))
          ec_.push_back(ECand{int32_t(i), row[1], row[2], row[0], sc, arc});
      }
    }
    // the final cut-off (run is now the best candidate score; min_active: the pruning decides)
    const float cut = relax ? kNegInf : run - beam;
    size_t m = 0;
    for (size_t i = 0; i < ec_.size(); ++i)
      if (ec_[i].score >= cut) ec_[m++] = ec_[i];
    ec_.resize(m);
    if (a_.lattice) {
      ec_lat_ = ec_;
      pc_lat_.clear();
      pc_src_lat_.clear();
    }
  }

  // 2. beam (a no-op now), recombination, max-active: next_ = the kept emitting candidates.
  void recombine(int64_t fr) {
    const size_t m = ec_.size();
    mstate_.resize(m);
    mscore_.resize(m);
    for (size_t i = 0; i < m; ++i) {
      mstate_[i] = ec_[i].dst;
      mscore_[i] = ec_[i].score;
    }
    prune(mstate_.data(), mscore_.data(), int32_t(m));
    next_.clear();
    for (int32_t i : kept_) {
      const ECand& c = ec_[size_t(i)];
      const int64_t hid = hist_add(cur_[size_t(c.tok)].hid, c.word, fr, c.lab2 >> 1, (c.lab2 & 1) != 0);
      next_.push_back(Tok{c.dst, c.score, hid, -1});
    }
  }

  // 3. epsilon passes over next_ (at most eps_depth; each from the tokens the last pass added).
  void epsilon_passes(int64_t fr, const float* boost) {
    std::vector<int32_t>& front = front_;  // the frontier: indices into next_ (all of them at first)
    front.clear();
    for (size_t i = 0; i < next_.size(); ++i) front.push_back(int32_t(i));
    for (int64_t pass = 0; pass < a_.eps_depth && !front_.empty(); ++pass)
      if (!epsilon_pass(fr, boost)) break;
  }

  // One epsilon pass from the frontier front_; false when it adds no candidate.
  bool epsilon_pass(int64_t fr, const float* boost) {
    std::vector<int32_t>& front = front_;
    std::vector<int32_t>& front_now = front_now_;
    pc_.clear();
    for (int32_t f : front) {
      const Tok& k = next_[size_t(f)];
      for (int64_t e = a_.p_ptr[k.s]; e < a_.p_ptr[k.s + 1]; ++e) {
        const int64_t w = a_.p_olabel[e];
        float arc = a_.p_score[e];
        float sc = k.score + arc;
        if (boost) {
          sc = sc + boost[w];
          arc = arc + boost[w];
        }
        pc_.push_back(PCand{f, int32_t(a_.p_dst[e]), int32_t(w), sc, arc});
      }
    }
    if (pc_.empty()) return false;
    if (a_.lattice) {
      for (const PCand& c : pc_) {
        pc_lat_.push_back(c);
        pc_src_lat_.push_back(next_[size_t(c.from)].s);
      }
    }
    const size_t n_old = next_.size(), n = n_old + pc_.size();
    mstate_.resize(n);
    mscore_.resize(n);
    for (size_t i = 0; i < n_old; ++i) {
      mstate_[i] = next_[i].s;
      mscore_[i] = next_[i].score;
    }
    for (size_t i = 0; i < pc_.size(); ++i) {
      mstate_[n_old + i] = pc_[i].dst;
      mscore_[n_old + i] = pc_[i].score;
    }
    prune(mstate_.data(), mscore_.data(), int32_t(n));
    std::vector<Tok>& merged = merged_;
    merged.clear();
    front_now.clear();
    for (int32_t i : kept_) {
      if (size_t(i) < n_old) {
        merged.push_back(next_[size_t(i)]);
      } else {
        const PCand& c = pc_[size_t(i) - n_old];
        const int64_t hid = hist_add(next_[size_t(c.from)].hid, c.word, fr, -1, false);
        front_now.push_back(int32_t(merged.size()));
        merged.push_back(Tok{c.dst, c.score, hid, -1});
      }
    }
    next_.swap(merged);
    front.swap(front_now);
    return true;
  }

  // 4. lattice: node ids of the survivors, the candidate arcs between survivors.
  void lattice_frame(int64_t b, int64_t t, int64_t fr, const float* am, const float* boost) {
    for (size_t i = 0; i < next_.size(); ++i) {
      next_[i].nid = a_.node_base + int64_t(r_.node_b.size());
      r_.node_b.push_back(b);
      at_[size_t(next_[i].s)] = int32_t(i);
    }
    const int64_t step = a_.step_base + t;
    const float lb = a_.lattice_beam;
    for (const ECand& c : ec_lat_) {
      const int32_t j = at_[size_t(c.dst)];
      if (j < 0 || !(c.score >= next_[size_t(j)].score - lb)) continue;
      float graph = c.arc;
      if (boost) graph = graph + boost[c.word];
      const int64_t lab = c.lab2 >> 1;
      lattice_arc(cur_[size_t(c.tok)].nid, next_[size_t(j)].nid, b, c.word, lab, (c.lab2 & 1) != 0, fr, graph,
                  am[lab], step, false);
    }
    for (size_t q = 0; q < pc_lat_.size(); ++q) {
      const PCand& c = pc_lat_[q];
      const int32_t i = at_[size_t(pc_src_lat_[q])], j = at_[size_t(c.dst)];
      if (i < 0 || j < 0 || !(c.score >= next_[size_t(j)].score - lb)) continue;
      lattice_arc(next_[size_t(i)].nid, next_[size_t(j)].nid, b, c.word, -1, false, fr, c.arc, 0.0f, step, true);
    }
    for (const Tok& k : next_) at_[size_t(k.s)] = -1;
  }

  void lattice_arc(int64_t src, int64_t dst, int64_t b, int64_t word, int64_t token, bool start, int64_t frame,
                   float graph, float am, int64_t step, bool eps) {
    r_.a_src.push_back(src);
    r_.a_dst.push_back(dst);
    r_.a_b.push_back(b);
    r_.a_word.push_back(word);
    r_.a_token.push_back(token);
    r_.a_start.push_back(start ? 1 : 0);
    r_.a_frame.push_back(frame);
    r_.a_graph.push_back(graph);
    r_.a_am.push_back(am);
    r_.a_step.push_back(step);
    r_.a_eps.push_back(eps ? 1 : 0);
  }
};

template <typename T>
void put(const std::vector<T>& v, void* out) {
  if (!v.empty() && out) std::memcpy(out, v.data(), v.size() * sizeof(T));
}

}  // namespace

extern "C" {

// Run the frames of one chunk; returns a Result handle (null when out of memory or on any C++ exception).
void* asrd_wfst_run(const WfstArgs* args) {
  Result* r = new (std::nothrow) Result();
  if (!r) return nullptr;
  const int rc = asrd::guard_code<int>([&] {
    Search(*args, *r).run();
    return 0;
  });
  if (rc != 0) {
    delete r;
    return nullptr;
  }
  return r;
}

// sizes[0..4]: tokens, history entries, lattice nodes, lattice arcs, frames stepped (max over utterances).
void asrd_wfst_sizes(const void* handle, int64_t* sizes) noexcept {
  const Result* r = static_cast<const Result*>(handle);
  sizes[0] = int64_t(r->tok_s.size());
  sizes[1] = int64_t(r->h_prev.size());
  sizes[2] = int64_t(r->node_b.size());
  sizes[3] = int64_t(r->a_src.size());
  sizes[4] = r->steps;
}

// Copy the outputs into buffers sized by asrd_wfst_sizes, in this order: tok_ptr [B + 1], tok_s,
// tok_score (float), tok_hid, tok_nid; h_prev, h_word, h_frame, h_token, h_start (uint8); node_b;
// a_src, a_dst, a_b, a_word, a_token, a_start (uint8), a_frame, a_graph (float), a_am (float),
// a_step, a_eps (uint8).
void asrd_wfst_copy(const void* handle, void* const* out) noexcept {
  const Result* r = static_cast<const Result*>(handle);
  put(r->tok_ptr, out[0]);
  put(r->tok_s, out[1]);
  put(r->tok_score, out[2]);
  put(r->tok_hid, out[3]);
  put(r->tok_nid, out[4]);
  put(r->h_prev, out[5]);
  put(r->h_word, out[6]);
  put(r->h_frame, out[7]);
  put(r->h_token, out[8]);
  put(r->h_start, out[9]);
  put(r->node_b, out[10]);
  put(r->a_src, out[11]);
  put(r->a_dst, out[12]);
  put(r->a_b, out[13]);
  put(r->a_word, out[14]);
  put(r->a_token, out[15]);
  put(r->a_start, out[16]);
  put(r->a_frame, out[17]);
  put(r->a_graph, out[18]);
  put(r->a_am, out[19]);
  put(r->a_step, out[20]);
  put(r->a_eps, out[21]);
}

void asrd_wfst_free(void* handle) noexcept { delete static_cast<Result*>(handle); }

}  // extern "C"
