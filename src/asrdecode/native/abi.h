// The native engine's C ABI: every struct the Python drivers fill, declared once. The ctypes mirrors
// live in asrdecode/native/abi.py; abi.cpp exports each struct's size and each field's offset and size
// (asrd_abi_field), and tests/native/test_native_abi.py checks every mirror against them.
#pragma once

#include <cstdint>

namespace asrd {

// A BackoffAutomaton's arrays (asrdecode/lm/_automaton.py), borrowed from its tensors.
struct Automaton {
  const int64_t* arc_offsets;    // [S + 1]
  const int64_t* arc_label;      // [A] sorted within each state
  const float* arc_weight;       // [A]
  const int64_t* arc_dest;       // [A]
  const int64_t* backoff_state;  // [S]
  const float* backoff_weight;   // [S]
  const int64_t* dense_index;    // [S] row of a state's resolved scores, -1: none
  const float* dense_scores;     // [H, V]
  const int64_t* dense_next;     // [H, V]
  const float* final_weight;     // [S] end-of-sentence scores
  int64_t num_states;
  int64_t vocab;
  int64_t blank;  // -1: none
};

// A WordNGramLM (asrdecode/lm/word.py) read from its arrays: states are (word-LM state << node_bits)
// | trie node; a word-starting token ends the open word (its back-off score over word labels plus a
// per-node constant) and opens the token's node; any other token walks the trie automaton.
struct WordLM {
  Automaton lm;               // the word n-gram over word labels (arcs and back-off only are read)
  Automaton trie;             // the token trie (dense rows, arcs, back-off to the OOV node)
  const int64_t* end_label;   // [nodes] word label ending at each node
  const float* end_const;     // [nodes] constant added to the word's LM score at its end
  const uint8_t* is_start;    // [V] the token ends the open word and starts a new one
  const int64_t* start_node;  // [V] node a word-starting token opens
  const float* start_score;   // [V] score it adds there
  int64_t node_bits;
  float lm_root_fill;         // score of a label without an arc anywhere on the chain
};

// One fusion model of a search (CTC, transducer): an automaton or a word LM read natively, or rows the
// driver computed ([rows, V] per step; CTC finalize: the final scores [B*K]).
struct FusionDesc {
  int64_t kind;  // 0: automaton, 1: rows, 2: word LM
  double weight;
  int64_t nonpositive;       // every score <= 0 (a candidate may be rejected before its look-up)
  Automaton automaton;
  const void* rows_scores;   // kind 1: [rows, V] in the state dtype
  const int64_t* rows_next;  // kind 1: [rows, V]
  const WordLM* word;        // kind 2
};

// ------------------------------------------------------------------------------- CTC (ctc_beam.cpp)
struct CtcBeamArgs {
  int64_t batch, beam, vocab, frames;  // B, K, V, T (frames of x)
  int64_t x_stride;                    // elements between utterances of x (frames contiguous)
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
  int64_t* tok_out;                    // [t_end - t_begin, B, K] tree records: token (-1: none),
  int64_t* par_out;                    //   parent slot,
  int64_t* dat_out;                    //   time (frame_index of the frame)
  const int64_t* frame_index;          // [B, frames] original frame of each frame of x
  const FusionDesc* models;
};

struct CollapseArgs {
  int64_t batch, frames, vocab, blank, is_double, weak;
  double threshold;
  const void* x;             // [B, T, V]
  const int64_t* lengths;    // [B]
  const int64_t* offsets;    // [B] original index of the chunk's first frame
  uint8_t* prev_blank;       // [B] state, updated in place
  void* pending;             // [B, V]
  int64_t* pending_index;    // [B]
  uint8_t* pending_valid;    // [B]
  void* out_x;               // [B, T + 1, V] kept frames first
  int64_t* out_len;          // [B]
  int64_t* out_index;        // [B, T + 1] their original frames (-1: padding)
};

struct CtcFinalArgs {
  int64_t batch, beam, is_double, num_models, with_final, nbest, steps;
  double beta;
  const void* p_b;
  const void* p_nb;
  const void* fscore;
  const void* length;
  const int64_t* fstates;   // [B, K, num_models]
  const FusionDesc* models;  // kind 0: automaton final weights; kind 1: rows_scores = final [B*K] (dtype)
  const int64_t* tok;       // tree [steps, B, K]
  const int64_t* par;
  const int64_t* dat;
  double* out_score;        // [B, nbest] (-inf: none)
  int64_t* out_len;         // [B, nbest] tokens (-1: no hypothesis)
  int64_t* out_tok;         // [B, nbest, steps]
  int64_t* out_dat;
};

struct CtcDecodeArgs {
  int64_t batch, beam, vocab, frames, x_stride, blank, is_double, num_tokens, merge_all, num_models;
  double beta, threshold;
  int64_t collapse;              // 0: off, 1: P(blank) > collapse_threshold, 2: weak (argmax is blank)
  double collapse_threshold;
  int64_t nbest;
  const void* x;                 // [B, T, V] (frames contiguous)
  const int64_t* lengths;        // [B]
  const int64_t* const* init_fstates;  // [num_models] pointers to [B * K]: the fresh hypotheses' fusion states
  const FusionDesc* models;  // kinds 0 and 2 only
  double* out_score;             // [B, nbest] as CtcFinalArgs, with steps = frames
  int64_t* out_len;
  int64_t* out_tok;
  int64_t* out_dat;
};

// ------------------------------------------------------------- transducer (transducer_*.cpp)
struct TransducerBeamArgs {
  int64_t batch, beam, vocab;      // B, K, V
  int64_t num_durations;           // D (RNN-T: 1, duration value 0)
  int64_t logit_stride;            // elements per logits row (V, or V + D for TDT)
  int64_t frames;                  // T of the projected encoder buffer (frame rows: b * T + frame)
  int64_t blank, tdt, aes, early, lm_weighted;
  int64_t max_symbols;             // < 0: no cap
  int64_t num_models, is_double, pack;
  double lam, beta;
  const int64_t* durations;        // [D] duration values
  const void* logits;              // [n, logit_stride] joint output of the expanding slots (state dtype)
  int64_t logit_rows, logit_cols;  // the logits' shape as the joint returned it (checked at every call)
  const int64_t* lengths;          // [B] frames of each utterance in the buffer
  const int64_t* offset;           // [B] global frame of buffer frame 0
  const uint8_t* final_chunk;      // [B] this chunk ends the utterance
  void* score;                     // [B, K] state dtype
  int64_t* time;                   // [B, K] frame (buffer-relative)
  int64_t* symbols;                // [B, K] labels on the current frame
  int64_t* hash;                   // [B, K] prefix hash
  int64_t* nlabels;                // [B, K] transcript length
  int64_t* last;                   // [B, K] last label (blank: none)
  int64_t* lm_states;              // [B*K, M]
  uint8_t* active;                 // [B, K] in: expanding this step; out: expanding the next step
  int64_t* parent_flat;            // [B*K] out: row of each new hypothesis's parent
  uint8_t* emitted;                // [B*K] out: the new hypothesis emitted a label
  int64_t* labels;                 // [B*K] out: that label, else blank
  int64_t* emit_rows;              // [B*K] out: the emitting rows, in order
  int64_t* frame_rows;             // [B*K] out: [:n] encoder buffer row (b * T + frame) of each joint row
  int64_t* joint_rows;             // [B*K] out: [:n] the slots the next step expands (its joint rows)
  int64_t* logit_pos;              // [B*K] in: each expanding slot's row of `logits`; out: for the next step
  int64_t* tok_out;                // [B, K] tree records of this step: token (-1: none),
  int64_t* par_out;                //   parent slot,
  int64_t* dat_out;                //   frame * pack + duration
  uint8_t* selected_ok;            // [B, K] out: selected before merging (tests)
  int64_t* counts;                 // out: [0] n, hypotheses expanding next, [1] emitting rows
  const FusionDesc* models;
};


struct WindArgs {
  int64_t batch, beam, vocab, window;  // B, K, V, W
  int64_t frames;                      // T of the projected encoder buffer
  int64_t blank, early, lm_weighted;
  int64_t max_symbols;                 // < 0: no cap
  int64_t num_models, is_double;
  double lam, beta;
  const void* logits;                  // [m, V] joint output of the rows asrd_wind_pop listed
  int64_t logit_rows, logit_cols;      // the logits' shape as the joint returned it (checked at every call)
  const int64_t* lengths;              // [B]
  const int64_t* offset;               // [B] global frame of buffer frame 0
  const uint8_t* final_chunk;          // [B]
  void* score;                         // [B, S] state dtype
  int64_t* time;                       // [B, S]
  int64_t* symbols;
  int64_t* hash;
  int64_t* nlabels;
  int64_t* last;
  int64_t* lm_states;                  // [B*S, M]
  uint8_t* active;                     // [B] in: the utterance steps; out: for the next step
  int64_t* tmin;                       // [B] the popped frame (asrd_wind_pop)
  int64_t* row_of;                     // [B*K*W] joint row of (popped slot k, window frame j), -1: none
  int64_t* enc_rows;                   // [B*K*W] out (pop): [:m] encoder buffer row of each joint row
  int64_t* dec_rows;                   // [B*K*W] out (pop): [:m] hypothesis row of each joint row
  int64_t* parent_flat;                // [B*S] out: each new hypothesis's parent row
  uint8_t* emitted;                    // [B*S] out
  int64_t* labels;                     // [B*S] out
  int64_t* emit_rows;                  // [B*S] out: [:n] the emitting rows
  int64_t* tok_out;                    // [B, S] tree records: token (-1: none),
  int64_t* par_out;                    //   parent slot,
  int64_t* dat_out;                    //   frame * pack (pack = 1 for RNN-T)
  int64_t* counts;                     // out: pop: [0] joint rows; step: [0] utterances stepping next, [1] emitting rows
  const FusionDesc* models;
  int64_t has_gamma;                   // 1: keep a hypothesis's expansions within gamma of its best one
  double gamma;                        //    (mAES's expansion threshold, by the ranking score)
};

// ------------------------------------------- transducer networks in C++ (greedy, sherpa-onnx's searches)
// A transducer's prediction and joint networks, weights borrowed from float32 C-order arrays
// (transducer_greedy_lstm.py's LstmJointWeights / StatelessJointWeights).
struct TransducerNet {
  int64_t kind;                  // 0: LSTM prediction network, 1: icefall's stateless decoder
  int64_t hidden, vocab;         // H (joint width), V
  int64_t outputs;               // O joint outputs: V, or V + durations (TDT)
  int64_t act;                   // joint activation: 0 tanh, 1 relu
  int64_t pred_dim, pred_layers; // LSTM: P, L
  int64_t embed_dim, groups, context;  // stateless: E, G, C
  const float* table;            // LSTM: [V, 4P] the first layer's input product per label
  const float* whh0;             // [4P, P]
  const float* wup;              // [L-1, 4P, 2P]
  const float* bup;              // [L-1, 4P]
  const float* wdec;             // [H, P]
  const float* bdec;             // [H]
  const float* emb;              // stateless: [V, E]
  const float* convw;            // [E, E/G, C]
  const float* convb;            // [E] or null
  const float* wp;               // [H, E]
  const float* bp;               // [H]
  const int32_t* start_ctx;      // [C] the first context (-1: embeds as zeros)
  const float* wout;             // [O, H]
  const float* bout;             // [O]
};

// One greedy, modified-beam or NeMo-beam call over a batch (asrd_transducer_greedy, asrd_modified_beam,
// asrd_nemo_beam).
struct NetSearchArgs {
  TransducerNet net;
  int64_t batch, frames;         // B, Tmax of enc
  int64_t blank;
  int64_t unk;                   // <unk> id (stateless greedy: counted as blank; the beams: extends like blank), -1: none
  int64_t fold;                  // modified beam: <unk> id folded into blank's logit by max first, -1: none
  int64_t max_symbols;           // labels per frame, 0: no cap
  int64_t beam;                  // the beams: hypotheses kept
  int64_t num_durations;         // TDT: D durations (0: RNN-T)
  int64_t capacity;              // greedy: labels per utterance the outputs hold (return -1: call again, larger)
  const float* enc;              // [B, Tmax, H] projected encoder output
  const int32_t* lengths;        // [B]
  const int32_t* durations;      // [D] or null
  int32_t* out_tokens;           // greedy: [B, capacity]; modified beam: [B, beam, Tmax]; NeMo beam: [B, beam, Tmax * max_symbols]
  int32_t* out_frames;           // as out_tokens
  int32_t* out_durs;             // TDT durations, as out_tokens (or null)
  int32_t* counts;               // greedy: [B] labels of each utterance
  double* scores;                // greedy: [B] each hypothesis's score
  int32_t* out_n;                // the beams: [B] hypotheses of each utterance
  int32_t* out_len;              // the beams: [B, beam] labels of each
  double* out_score;             // the beams: [B, beam]
};

// A whole ALSD++ / AES++ / WIND search with the networks in C++ (transducer_beam_net.cpp): one call per batch.
struct TransducerSearchArgs {
  TransducerNet net;               // the prediction and joint networks (net.vocab: V; net.outputs: V, TDT V + D)
  int64_t batch, beam;             // B, K
  int64_t num_durations;           // D (RNN-T: 1, duration value 0)
  int64_t frames;                  // T
  int64_t blank, tdt, aes, early, lm_weighted;
  int64_t max_symbols;             // < 0: no cap
  int64_t symbol_guard;            // without a cap: more labels than this on one frame stops the search (counts[2])
  int64_t num_models, pack;
  int64_t capacity;                // labels each output hypothesis holds (counts[1] > capacity: call again, larger)
  int64_t fold;                    // <unk> id folded into blank by max (-1: none)
  int64_t wind, window;            // 1: WIND beam search over `window` frames (RNN-T; S = (window + 1) * K slots),
                                   //   2: the same reading every window frame (no lazy window: its check)
  int64_t has_gamma;               // WIND: 1 keeps a hypothesis's expansions within gamma of its best one
  double lam, beta, gamma;
  const int64_t* durations;        // [D] duration values
  const float* enc;                // [B, T, H] projected encoder output
  const int64_t* lengths;          // [B]
  const int64_t* init_states;      // [B*S, M] fresh hypotheses' fusion states (S = K, WIND (window + 1) * K)
  const FusionDesc* models;        // [M] kinds 0 and 2
  float* out_score;                // [B, S] each slot's final score: score + fusion end scores (-inf: none)
  int64_t* out_len;                // [B, S] its labels (-1: no hypothesis)
  int64_t* out_tok;                // [B, S, capacity]
  int64_t* out_dat;                // [B, S, capacity] frame * pack + duration
  int64_t* counts;                 // out: [0] steps, [1] longest hypothesis, [2] stopped by symbol_guard, [3] joint rows
};

// One chunk of a streaming ALSD++ / AES++ / WIND search with the networks in C++ (transducer_beam_net.cpp):
// the search of `search` (its enc [B, T, H] is the chunk's buffer: the carried frames, then the new ones;
// its out_* fields are not used) from the carried state below, until no hypothesis can step without frames
// not received yet; the state after it is written back in place, with the tree records of its steps. When
// counts[0] (steps) > record_capacity nothing is written (call again with room for counts[0] steps).
struct TransducerChunkArgs {
  TransducerSearchArgs search;
  int64_t carried;                 // 1: start from the state below; 0: fresh hypotheses (search.init_states)
  const int64_t* offset;           // [B] global frame of enc's frame 0
  const uint8_t* final_chunk;      // [B] 1: the chunk ends the utterance
  float* score;                    // [B, S] in (carried) / out
  int64_t* time;                   // [B, S] in / out: frame relative to enc's frame 0
  int64_t* symbols;                // [B, S] labels on the current frame
  int64_t* hash;                   // [B, S] prefix hash
  int64_t* nlabels;                // [B, S] transcript length
  int64_t* last;                   // [B, S] last label (blank: none)
  int64_t* lm_states;              // [B*S, M] in (carried) / out
  float* pred_h;                   // LSTM: [B*S, L, P] in (carried) / out
  float* pred_c;                   // LSTM: [B*S, L, P]
  int32_t* pred_ctx;               // stateless: [B*S, C] in (carried) / out
  float* pred_g;                   // [B*S, H] out: each slot's prediction output after the joint's projection
  int64_t* records;                // [record_capacity, 3, B*S] out: per step the tree records (token, parent
                                   //   slot, frame * pack + duration) of every slot
  int64_t record_capacity;         // steps `records` holds
};

// ------------------------------------------------------------------------------- WFST (wfst.cpp)
struct WfstArgs {
  int64_t batch, frames, vocab, num_states, eps_depth, max_active, boost_width, lattice;
  int64_t hist_base, node_base, step_base, min_active;
  float beam, lattice_beam;
  const int64_t* e_ptr;     // [S + 1]
  const int32_t* e_rows;    // [A, 4]: 2 * token + starts, dst, word, score bits
  const float* e_max;       // [S] best emitting arc score of each state (-inf: none)
  const int64_t* p_ptr;     // [S + 1]
  const int64_t* p_dst;     // [P]
  const int64_t* p_olabel;  // [P]
  const float* p_score;     // [P]
  const float* am;          // [B, T, vocab] acoustic_scale * log_probs, contiguous
  const int64_t* lengths;   // [B]
  const int64_t* offset;    // [B] frames consumed before this chunk
  const float* boost;       // [B, boost_width] or null
  const int64_t* tok_ptr;   // [B + 1] tokens grouped by utterance
  const int64_t* tok_s;
  const float* tok_score;
  const int64_t* tok_hid;
  const int64_t* tok_nid;   // lattice node ids (lattice only)
};

// ------------------------------------------------------------------------------ ARPA (arpa.cpp)
// One chunk of an ARPA file per asrd_arpa_feed call; the outputs are bound after the header (the
// call that returns 1), each order's arrays sized by its declared count.
struct ArpaArgs {
  const uint8_t* data;           // this chunk [length]
  int64_t length;
  int64_t final_chunk;           // 1: the file ends with this chunk
  int64_t consumed;              // out: bytes of the chunk read (less than length when the header ends)
  int64_t max_order;             // capacity of counts
  int64_t order;                 // out after the header; in: the order the outputs are bound for
  int64_t* counts;               // [max_order] out: the declared count of each order
  const int64_t* capacity;       // [order] in: each order's output length (its count)
  int32_t* const* words;         // [order] -> [n_k, k] word ids (1-gram index)
  float* const* logprob;         // [order] -> [n_k] log10 probabilities (float32)
  float* const* backoff;         // [order] -> [n_k] log10 backoffs, zero-filled by the caller (written
  uint8_t* const* has_backoff;   //   where the line has one) / [n_k] zero-filled, 1 where it has one
  int64_t link_bytes;            // 4: context / suffix are int32 (every order below the top < 2^25), 8: int64
  void* const* context;          // [order] -> [n_k] (k >= 3): index of the context (k-1)-gram in its order
  void* const* suffix;           // [order] -> [n_k] (k >= 3): (index << 6) | order of the longest proper
                                 //   suffix that is an n-gram (a 2-gram's links are its words)
};

}  // namespace asrd
