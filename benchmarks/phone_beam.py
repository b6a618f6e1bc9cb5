#!/usr/bin/env python3
"""phone-ctc's CTC prefix beam search with the lexicon-mode word LM (models/phone_words.py): WER.

What `asrdecode eval data/<set>/manifest.jsonl --model phone-ctc --decoder beam` computes once the
CLI uses the bundle's ``beam_defaults``: hama's phone log-probs of every clip, ``ctc.beam_search``
with ``PhoneCTCBundle.beam_defaults`` (beam 16, word LM weight 0.8, 0.5 per word, the bundled
52k-word 3-gram over the shipped lexicon), WER by ``asrdecode.evaluate.wer`` (its normalisation).
Also the decode time as a ratio to the WFST decoder's on the same log-probs (phone-ctc's default,
its cached graph of ``$ASRDECODE_PHONE_WORDS`` words), one thread, one run.

Usage: OMP_NUM_THREADS=1 python3 benchmarks/phone_beam.py [--sets real,synth_test] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from asrdecode import ctc, evaluate  # noqa: E402
from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models.phone import PhoneCTCBundle, default_words  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="real,synth_test")
    ap.add_argument("--out")
    args = ap.parse_args()
    bundle = PhoneCTCBundle(words=default_words())
    t0 = time.perf_counter()
    kw = bundle.beam_defaults
    setup = time.perf_counter() - t0
    from asrdecode.ctc.wfst import WFSTDecoder, load_graph
    from asrdecode.models.phone import ACOUSTIC_SCALE, MAX_ACTIVE, WFST_BEAM

    wfst = WFSTDecoder(load_graph(bundle.graph_path()), beam=WFST_BEAM, max_active=MAX_ACTIVE,
                       acoustic_scale=ACOUSTIC_SCALE)
    words = "all" if bundle.words is None else bundle.words
    lines = [f"### phone-ctc: words from the CTC prefix beam search ({time.strftime('%Y-%m-%d')})", "",
             "`OMP_NUM_THREADS=1 python3 benchmarks/phone_beam.py` — beam search with `PhoneCTCBundle.beam_defaults` "
             f"(beam {kw['beam']}, lexicon-mode word LM over {len(kw['fusion'][0][0].words)} pronunciations, weight "
             f"{kw['fusion'][0][1]}); WFST = phone-ctc's default decoder over its {words}-word graph. Word LM "
             f"set-up {setup:.1f} s (cached after the first build). One thread.", "",
             "| set | clips | beam WER % | WFST WER % | beam time / WFST time |", "|---|---|---|---|---|"]
    for name in args.sets.split(","):
        rows = [json.loads(x) for x in (ROOT / "data" / name / "manifest.jsonl").read_text().splitlines() if x.strip()]
        feats, lens = bundle.features([read_audio(ROOT / "data" / name / r["audio_filepath"]) for r in rows])
        lp = bundle.model.log_probs_from_encoder(bundle.encode_features(feats, lens)[0])
        refs = [r["text"] for r in rows]
        with torch.inference_mode():
            t0 = time.perf_counter()
            beam = ctc.beam_search(lp, lens, bundle.blank_id, **kw)
            t_beam = time.perf_counter() - t0
            t0 = time.perf_counter()
            graph = wfst(lp, lens)
            t_wfst = time.perf_counter() - t0
        w_beam = 100 * evaluate.wer(refs, [r[0].text for r in beam])
        w_wfst = 100 * evaluate.wer(refs, [" ".join(w for w, _, _ in h.words) for h in graph])
        lines.append(f"| {name} | {len(rows)} | {w_beam:.1f} | {w_wfst:.1f} | {t_beam / t_wfst:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
