"""Overhead of the registry pipeline: ``make_pipeline(...).decode`` vs the search call main's pipeline made.

One process, one thread, the bundled synthetic test set (50 utterances, encoder run once); the two
calls alternate their order each repeat; prints new / old as the ratio of the medians and checks
that the tokens are equal. Under two minutes::

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/pipeline_overhead.py
"""

from __future__ import annotations

import statistics
import time

import torch

from asrdecode import ctc
from asrdecode import transducer as tr
from asrdecode.audio import read_audio
from asrdecode.evaluate import read_manifest
from asrdecode.models import load
from asrdecode.pipeline import best_of, make_pipeline, resolve_options


def main() -> None:
    torch.set_num_threads(1)
    waves = [read_audio(e.audio_filepath) for e in read_manifest("data/synth_test/manifest.jsonl")]
    rnnt, cdemo = load("demo-rnnt"), load("demo-ctc")
    with torch.inference_mode():
        enc, n = rnnt.encode(waves)
        lp = cdemo.model.log_probs_from_encoder(enc)
    tok, ctok, blank = rnnt.tokenizer, cdemo.tokenizer, cdemo.blank_id
    cases = {  # name: (registry pipeline, main's decoder call, input)
        "rnnt greedy": (make_pipeline(rnnt, resolve_options(rnnt, {})).decode,
                        lambda x, n: tr.greedy(rnnt.model, x, n, window=1, tokenizer=tok, acceleration="eager"), enc),
        "rnnt beam 4": (make_pipeline(rnnt, resolve_options(rnnt, {"decoder": "beam", "beam": 4})).decode,
                        lambda x, n: best_of(tr.beam_search(rnnt.model, x, n, beam=4, method="alsd", tokenizer=tok)),
                        enc),
        "ctc greedy": (make_pipeline(cdemo, resolve_options(cdemo, {})).decode,
                       lambda x, n: ctc.greedy(x, n, blank, ctok), lp),
        "ctc beam 8": (make_pipeline(cdemo, resolve_options(cdemo, {"decoder": "beam"})).decode,
                       lambda x, n: best_of(ctc.beam_search(x, n, blank, beam=8, fusion=[], beta=0.0, tokenizer=ctok)),
                       lp),
    }
    for name, (new, old, x) in cases.items():
        old = torch.inference_mode()(old)  # as main's make_pipeline wrapped its decoder
        repeats = 11 if "rnnt" in name else 61
        to: list[float] = []
        tn: list[float] = []
        with torch.inference_mode():
            assert [h.tokens for h in new(x, n)] == [h.tokens for h in old(x, n)]
            for i in range(repeats):
                for f, acc in ((old, to), (new, tn)) if i % 2 else ((new, tn), (old, to)):
                    t0 = time.perf_counter()
                    f(x, n)
                    acc.append(time.perf_counter() - t0)
        mo, mn = statistics.median(to), statistics.median(tn)
        print(f"{name:12s} registry pipeline / main's call: {mn / mo:.3f} ({1e3 * mn:.2f} vs {1e3 * mo:.2f} ms, "
              f"median of {repeats} each); same tokens")


if __name__ == "__main__":
    main()
