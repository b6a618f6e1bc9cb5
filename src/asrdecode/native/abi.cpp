// The layout of every struct of abi.h, exported so that a test can check the ctypes mirrors
// (asrdecode/native/abi.py) field by field: asrd_abi_field(i, ...) gives entry i (struct name, field name,
// offset, size; an entry with an empty field name gives the struct's sizeof) and returns 0 past the end.
#include <cstddef>

#include "abi.h"

namespace {

struct FieldLayout {
  const char* type;
  const char* field;
  int64_t offset;
  int64_t size;
};

#define ASRD_SIZE(T) {#T, "", 0, static_cast<int64_t>(sizeof(asrd::T))}
#define ASRD_FIELD(T, f) {#T, #f, static_cast<int64_t>(offsetof(asrd::T, f)), static_cast<int64_t>(sizeof(asrd::T::f))}

const FieldLayout kLayout[] = {
    ASRD_SIZE(Automaton),
    ASRD_FIELD(Automaton, arc_offsets), ASRD_FIELD(Automaton, arc_label), ASRD_FIELD(Automaton, arc_weight),
    ASRD_FIELD(Automaton, arc_dest), ASRD_FIELD(Automaton, backoff_state),
    ASRD_FIELD(Automaton, backoff_weight), ASRD_FIELD(Automaton, dense_index),
    ASRD_FIELD(Automaton, dense_scores), ASRD_FIELD(Automaton, dense_next), ASRD_FIELD(Automaton, final_weight),
    ASRD_FIELD(Automaton, num_states), ASRD_FIELD(Automaton, vocab), ASRD_FIELD(Automaton, blank),
    ASRD_SIZE(WordLM),
    ASRD_FIELD(WordLM, lm), ASRD_FIELD(WordLM, trie), ASRD_FIELD(WordLM, end_label),
    ASRD_FIELD(WordLM, end_const), ASRD_FIELD(WordLM, is_start), ASRD_FIELD(WordLM, start_node),
    ASRD_FIELD(WordLM, start_score), ASRD_FIELD(WordLM, node_bits), ASRD_FIELD(WordLM, lm_root_fill),
    ASRD_SIZE(FusionDesc),
    ASRD_FIELD(FusionDesc, kind), ASRD_FIELD(FusionDesc, weight), ASRD_FIELD(FusionDesc, nonpositive),
    ASRD_FIELD(FusionDesc, automaton), ASRD_FIELD(FusionDesc, rows_scores), ASRD_FIELD(FusionDesc, rows_next),
    ASRD_FIELD(FusionDesc, word),
    ASRD_SIZE(CtcBeamArgs),
    ASRD_FIELD(CtcBeamArgs, batch), ASRD_FIELD(CtcBeamArgs, beam), ASRD_FIELD(CtcBeamArgs, vocab),
    ASRD_FIELD(CtcBeamArgs, frames), ASRD_FIELD(CtcBeamArgs, x_stride), ASRD_FIELD(CtcBeamArgs, blank),
    ASRD_FIELD(CtcBeamArgs, is_double), ASRD_FIELD(CtcBeamArgs, num_tokens), ASRD_FIELD(CtcBeamArgs, merge_all),
    ASRD_FIELD(CtcBeamArgs, num_models), ASRD_FIELD(CtcBeamArgs, t_begin), ASRD_FIELD(CtcBeamArgs, t_end),
    ASRD_FIELD(CtcBeamArgs, beta), ASRD_FIELD(CtcBeamArgs, threshold), ASRD_FIELD(CtcBeamArgs, x),
    ASRD_FIELD(CtcBeamArgs, lengths), ASRD_FIELD(CtcBeamArgs, p_b), ASRD_FIELD(CtcBeamArgs, p_nb),
    ASRD_FIELD(CtcBeamArgs, fscore), ASRD_FIELD(CtcBeamArgs, length), ASRD_FIELD(CtcBeamArgs, peak),
    ASRD_FIELD(CtcBeamArgs, last), ASRD_FIELD(CtcBeamArgs, hash), ASRD_FIELD(CtcBeamArgs, parent_hash),
    ASRD_FIELD(CtcBeamArgs, fstates), ASRD_FIELD(CtcBeamArgs, tok_out), ASRD_FIELD(CtcBeamArgs, par_out),
    ASRD_FIELD(CtcBeamArgs, dat_out), ASRD_FIELD(CtcBeamArgs, frame_index), ASRD_FIELD(CtcBeamArgs, models),
    ASRD_SIZE(CollapseArgs),
    ASRD_FIELD(CollapseArgs, batch), ASRD_FIELD(CollapseArgs, frames), ASRD_FIELD(CollapseArgs, vocab),
    ASRD_FIELD(CollapseArgs, blank), ASRD_FIELD(CollapseArgs, is_double), ASRD_FIELD(CollapseArgs, weak),
    ASRD_FIELD(CollapseArgs, threshold), ASRD_FIELD(CollapseArgs, x), ASRD_FIELD(CollapseArgs, lengths),
    ASRD_FIELD(CollapseArgs, offsets), ASRD_FIELD(CollapseArgs, prev_blank), ASRD_FIELD(CollapseArgs, pending),
    ASRD_FIELD(CollapseArgs, pending_index), ASRD_FIELD(CollapseArgs, pending_valid),
    ASRD_FIELD(CollapseArgs, out_x), ASRD_FIELD(CollapseArgs, out_len), ASRD_FIELD(CollapseArgs, out_index),
    ASRD_SIZE(CtcFinalArgs),
    ASRD_FIELD(CtcFinalArgs, batch), ASRD_FIELD(CtcFinalArgs, beam), ASRD_FIELD(CtcFinalArgs, is_double),
    ASRD_FIELD(CtcFinalArgs, num_models), ASRD_FIELD(CtcFinalArgs, with_final), ASRD_FIELD(CtcFinalArgs, nbest),
    ASRD_FIELD(CtcFinalArgs, steps), ASRD_FIELD(CtcFinalArgs, beta), ASRD_FIELD(CtcFinalArgs, p_b),
    ASRD_FIELD(CtcFinalArgs, p_nb), ASRD_FIELD(CtcFinalArgs, fscore), ASRD_FIELD(CtcFinalArgs, length),
    ASRD_FIELD(CtcFinalArgs, fstates), ASRD_FIELD(CtcFinalArgs, models), ASRD_FIELD(CtcFinalArgs, tok),
    ASRD_FIELD(CtcFinalArgs, par), ASRD_FIELD(CtcFinalArgs, dat), ASRD_FIELD(CtcFinalArgs, out_score),
    ASRD_FIELD(CtcFinalArgs, out_len), ASRD_FIELD(CtcFinalArgs, out_tok), ASRD_FIELD(CtcFinalArgs, out_dat),
    ASRD_SIZE(CtcDecodeArgs),
    ASRD_FIELD(CtcDecodeArgs, batch), ASRD_FIELD(CtcDecodeArgs, beam), ASRD_FIELD(CtcDecodeArgs, vocab),
    ASRD_FIELD(CtcDecodeArgs, frames), ASRD_FIELD(CtcDecodeArgs, x_stride), ASRD_FIELD(CtcDecodeArgs, blank),
    ASRD_FIELD(CtcDecodeArgs, is_double), ASRD_FIELD(CtcDecodeArgs, num_tokens),
    ASRD_FIELD(CtcDecodeArgs, merge_all), ASRD_FIELD(CtcDecodeArgs, num_models),
    ASRD_FIELD(CtcDecodeArgs, beta), ASRD_FIELD(CtcDecodeArgs, threshold), ASRD_FIELD(CtcDecodeArgs, collapse),
    ASRD_FIELD(CtcDecodeArgs, collapse_threshold), ASRD_FIELD(CtcDecodeArgs, nbest),
    ASRD_FIELD(CtcDecodeArgs, x), ASRD_FIELD(CtcDecodeArgs, lengths), ASRD_FIELD(CtcDecodeArgs, init_fstates),
    ASRD_FIELD(CtcDecodeArgs, models), ASRD_FIELD(CtcDecodeArgs, out_score), ASRD_FIELD(CtcDecodeArgs, out_len),
    ASRD_FIELD(CtcDecodeArgs, out_tok), ASRD_FIELD(CtcDecodeArgs, out_dat),
    ASRD_SIZE(TransducerBeamArgs),
    ASRD_FIELD(TransducerBeamArgs, batch), ASRD_FIELD(TransducerBeamArgs, beam),
    ASRD_FIELD(TransducerBeamArgs, vocab), ASRD_FIELD(TransducerBeamArgs, num_durations),
    ASRD_FIELD(TransducerBeamArgs, logit_stride), ASRD_FIELD(TransducerBeamArgs, frames),
    ASRD_FIELD(TransducerBeamArgs, blank), ASRD_FIELD(TransducerBeamArgs, tdt),
    ASRD_FIELD(TransducerBeamArgs, aes), ASRD_FIELD(TransducerBeamArgs, early),
    ASRD_FIELD(TransducerBeamArgs, lm_weighted), ASRD_FIELD(TransducerBeamArgs, max_symbols),
    ASRD_FIELD(TransducerBeamArgs, num_models), ASRD_FIELD(TransducerBeamArgs, is_double),
    ASRD_FIELD(TransducerBeamArgs, pack), ASRD_FIELD(TransducerBeamArgs, lam),
    ASRD_FIELD(TransducerBeamArgs, beta), ASRD_FIELD(TransducerBeamArgs, durations),
    ASRD_FIELD(TransducerBeamArgs, logits), ASRD_FIELD(TransducerBeamArgs, logit_rows),
    ASRD_FIELD(TransducerBeamArgs, logit_cols), ASRD_FIELD(TransducerBeamArgs, lengths),
    ASRD_FIELD(TransducerBeamArgs, offset), ASRD_FIELD(TransducerBeamArgs, final_chunk),
    ASRD_FIELD(TransducerBeamArgs, score), ASRD_FIELD(TransducerBeamArgs, time),
    ASRD_FIELD(TransducerBeamArgs, symbols), ASRD_FIELD(TransducerBeamArgs, hash),
    ASRD_FIELD(TransducerBeamArgs, nlabels), ASRD_FIELD(TransducerBeamArgs, last),
    ASRD_FIELD(TransducerBeamArgs, lm_states), ASRD_FIELD(TransducerBeamArgs, active),
    ASRD_FIELD(TransducerBeamArgs, parent_flat), ASRD_FIELD(TransducerBeamArgs, emitted),
    ASRD_FIELD(TransducerBeamArgs, labels), ASRD_FIELD(TransducerBeamArgs, emit_rows),
    ASRD_FIELD(TransducerBeamArgs, frame_rows), ASRD_FIELD(TransducerBeamArgs, joint_rows),
    ASRD_FIELD(TransducerBeamArgs, logit_pos), ASRD_FIELD(TransducerBeamArgs, tok_out),
    ASRD_FIELD(TransducerBeamArgs, par_out), ASRD_FIELD(TransducerBeamArgs, dat_out),
    ASRD_FIELD(TransducerBeamArgs, selected_ok), ASRD_FIELD(TransducerBeamArgs, counts),
    ASRD_FIELD(TransducerBeamArgs, models),
    ASRD_SIZE(WindArgs),
    ASRD_FIELD(WindArgs, batch), ASRD_FIELD(WindArgs, beam), ASRD_FIELD(WindArgs, vocab),
    ASRD_FIELD(WindArgs, window), ASRD_FIELD(WindArgs, frames), ASRD_FIELD(WindArgs, blank),
    ASRD_FIELD(WindArgs, early), ASRD_FIELD(WindArgs, lm_weighted), ASRD_FIELD(WindArgs, max_symbols),
    ASRD_FIELD(WindArgs, num_models), ASRD_FIELD(WindArgs, is_double), ASRD_FIELD(WindArgs, lam),
    ASRD_FIELD(WindArgs, beta), ASRD_FIELD(WindArgs, logits), ASRD_FIELD(WindArgs, logit_rows),
    ASRD_FIELD(WindArgs, logit_cols), ASRD_FIELD(WindArgs, lengths), ASRD_FIELD(WindArgs, offset),
    ASRD_FIELD(WindArgs, final_chunk), ASRD_FIELD(WindArgs, score), ASRD_FIELD(WindArgs, time),
    ASRD_FIELD(WindArgs, symbols), ASRD_FIELD(WindArgs, hash), ASRD_FIELD(WindArgs, nlabels),
    ASRD_FIELD(WindArgs, last), ASRD_FIELD(WindArgs, lm_states), ASRD_FIELD(WindArgs, active),
    ASRD_FIELD(WindArgs, tmin), ASRD_FIELD(WindArgs, row_of), ASRD_FIELD(WindArgs, enc_rows),
    ASRD_FIELD(WindArgs, dec_rows), ASRD_FIELD(WindArgs, parent_flat), ASRD_FIELD(WindArgs, emitted),
    ASRD_FIELD(WindArgs, labels), ASRD_FIELD(WindArgs, emit_rows), ASRD_FIELD(WindArgs, tok_out),
    ASRD_FIELD(WindArgs, par_out), ASRD_FIELD(WindArgs, dat_out), ASRD_FIELD(WindArgs, counts),
    ASRD_FIELD(WindArgs, models), ASRD_FIELD(WindArgs, has_gamma), ASRD_FIELD(WindArgs, gamma),
    ASRD_SIZE(WfstArgs),
    ASRD_FIELD(WfstArgs, batch), ASRD_FIELD(WfstArgs, frames), ASRD_FIELD(WfstArgs, vocab),
    ASRD_FIELD(WfstArgs, num_states), ASRD_FIELD(WfstArgs, eps_depth), ASRD_FIELD(WfstArgs, max_active),
    ASRD_FIELD(WfstArgs, boost_width), ASRD_FIELD(WfstArgs, lattice), ASRD_FIELD(WfstArgs, hist_base),
    ASRD_FIELD(WfstArgs, node_base), ASRD_FIELD(WfstArgs, step_base), ASRD_FIELD(WfstArgs, min_active),
    ASRD_FIELD(WfstArgs, beam), ASRD_FIELD(WfstArgs, lattice_beam), ASRD_FIELD(WfstArgs, e_ptr),
    ASRD_FIELD(WfstArgs, e_rows), ASRD_FIELD(WfstArgs, e_max), ASRD_FIELD(WfstArgs, p_ptr),
    ASRD_FIELD(WfstArgs, p_dst), ASRD_FIELD(WfstArgs, p_olabel), ASRD_FIELD(WfstArgs, p_score),
    ASRD_FIELD(WfstArgs, am), ASRD_FIELD(WfstArgs, lengths), ASRD_FIELD(WfstArgs, offset),
    ASRD_FIELD(WfstArgs, boost), ASRD_FIELD(WfstArgs, tok_ptr), ASRD_FIELD(WfstArgs, tok_s),
    ASRD_FIELD(WfstArgs, tok_score), ASRD_FIELD(WfstArgs, tok_hid), ASRD_FIELD(WfstArgs, tok_nid),
    ASRD_SIZE(ArpaArgs),
    ASRD_FIELD(ArpaArgs, data), ASRD_FIELD(ArpaArgs, length), ASRD_FIELD(ArpaArgs, final_chunk),
    ASRD_FIELD(ArpaArgs, consumed), ASRD_FIELD(ArpaArgs, max_order), ASRD_FIELD(ArpaArgs, order),
    ASRD_FIELD(ArpaArgs, counts), ASRD_FIELD(ArpaArgs, capacity), ASRD_FIELD(ArpaArgs, words),
    ASRD_FIELD(ArpaArgs, logprob), ASRD_FIELD(ArpaArgs, backoff), ASRD_FIELD(ArpaArgs, has_backoff),
    ASRD_FIELD(ArpaArgs, lines), ASRD_FIELD(ArpaArgs, context), ASRD_FIELD(ArpaArgs, suffix),
};

}  // namespace

extern "C" {

// Entry i of the layout table; returns 1, or 0 when i is past the end (nothing written).
int asrd_abi_field(int64_t i, const char** type, const char** field, int64_t* offset, int64_t* size) noexcept {
  if (i < 0 || i >= static_cast<int64_t>(sizeof(kLayout) / sizeof(kLayout[0]))) return 0;
  *type = kLayout[i].type;
  *field = kLayout[i].field;
  *offset = kLayout[i].offset;
  *size = kLayout[i].size;
  return 1;
}

}  // extern "C"
