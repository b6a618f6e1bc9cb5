"""Small, independent greedy decoders used by the training recipe to track dev WER (WER itself: asrdecode.evaluate).

They are deliberately plain (per-utterance loops) so the training curve does not depend on the
library's fast decoders; ``recipes/evaluate_models.py`` uses the library's decoders.
"""

from __future__ import annotations

from functools import partial

import torch

from asrdecode import evaluate


def ctc_greedy_ids(log_probs: torch.Tensor, lengths: torch.Tensor, blank: int) -> list[list[int]]:
    """``[B, T, V]`` log-probs -> per-utterance token ids (argmax, merge repeats, drop blank)."""
    best = log_probs.argmax(-1)
    out = []
    for b in range(best.shape[0]):
        seq, prev = [], -1
        for s in best[b, : int(lengths[b])].tolist():
            if s != prev and s != blank:
                seq.append(s)
            prev = s
        out.append(seq)
    return out


@torch.no_grad()
def transducer_greedy_ids(model, enc: torch.Tensor, lengths: torch.Tensor, max_symbols: int = 10,
                          blank_probs: list[float] | None = None) -> list[list[int]]:
    """RNN-T / TDT greedy (Algorithm 1 of the label-looping paper) one utterance at a time.

    When ``blank_probs`` is a list, p(blank) of the first decision on every visited frame is
    appended to it.
    """
    v = model.vocab_size
    durs = model.durations
    out = []
    for b in range(enc.shape[0]):
        ep = model.project_encoder(enc[b, : int(lengths[b])])
        state = model.initial_state(1)
        dec, state_next = model.predict(torch.tensor([model.blank_id]), state)
        dp = model.project_decoder(dec)[0]
        seq, t, emitted = [], 0, 0
        while t < ep.shape[0]:
            logits = model.joint(ep[t], dp)
            k = int(logits[:v].argmax())
            if blank_probs is not None and emitted == 0:
                blank_probs.append(float(torch.softmax(logits[:v], -1)[model.blank_id]))
            if durs is not None:
                d = durs[int(logits[v:].argmax())]
            else:
                d = 0 if k != model.blank_id else 1
            if k == model.blank_id:
                t += max(d, 1)
                emitted = 0
                continue
            seq.append(k)
            emitted += 1
            state = state_next
            dec, state_next = model.predict(torch.tensor([k]), state)
            dp = model.project_decoder(dec)[0]
            if d > 0:
                t += d
                emitted = 0
            elif emitted >= max_symbols:
                t += 1
                emitted = 0
        out.append(seq)
    return out


# Corpus word error rate on the texts as given (word edits / reference words): the library's
# jiwer-based implementation, without its text normalisation (recipe texts are normalised already).
wer = partial(evaluate.wer, normalize=False)
