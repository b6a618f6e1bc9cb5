// C ABI of the backpointer-tree helpers of engine.h (used by asrdecode.beam_hyps.BeamTree.backtrack).
#include "engine.h"

extern "C" {

// Sequences of the hypotheses slots [B, N] (negative: none) of a tree tok/par/dat [steps, B, K]:
// out_tok / out_dat [B, N, steps], out_len [B, N]. Returns 0, or 1 for a parent out of range.
int asrd_backtrack(const int64_t* tok, const int64_t* par, const int64_t* dat, int64_t steps, int64_t B, int64_t K,
                   const int64_t* slots, int64_t N, int64_t* out_tok, int64_t* out_dat, int64_t* out_len) noexcept {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < N; ++j) {
      const int64_t slot = slots[b * N + j];
      int64_t* ot = out_tok + (b * N + j) * steps;
      int64_t* od = out_dat + (b * N + j) * steps;
      if (slot < 0) {
        out_len[b * N + j] = 0;
        continue;
      }
      const int64_t n = asrd::backtrack_one(tok, par, dat, steps, B, K, b, slot, ot, od);
      if (n < 0) return 1;
      out_len[b * N + j] = n;
    }
  }
  return 0;
}

}  // extern "C"
