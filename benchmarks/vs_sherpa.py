"""asrdecode vs sherpa-onnx 2.0.1 on sherpa-onnx's own file layouts: decode-only time, one thread.

Random models at realistic decoder / joiner sizes, built here in the two layouts sherpa-onnx reads
(tests/sherpa_models.py): icefall stateless (vocab 500, joiner 512, context 2) and NeMo RNN-T
(vocab 1024 + blank, LSTM 640, joiner 640). Their encoders are one cheap convolution, so the
decoding dominates. Same 60 clips (data/real + data/synth_test), one thread everywhere
(torch, onnxruntime, sherpa-onnx ``num_threads=1``), interleaved repeats, in one run; each time the
fastest of the repeats (``--stat min``, the default: load on a shared machine only ever adds time, and the
sherpa-onnx decode estimate is a difference of two such times) or their median. sherpa-onnx's greedy
and null-model runs are repeated ``--sherpa-repeats`` more times (15), as their difference is small.

sherpa-onnx has no decode-only entry point, so its decode time is its whole recognise time minus
the whole time of a "null" twin of the model, measured in the same run: the same encoder (same
seed and sizes, so the same front end and encoder work) with a 3-token decoder / joiner whose blank
always wins (its search is one tiny joiner call per frame). Ours is timed directly on the
precomputed encoder output. Per utterance: one clip at a time; batched: all clips in one call.
NeMo layout, "sherpa-nemo beam 4": ``--compat sherpa --decoder beam``, the search sherpa-onnx's NeMo
``modified_beam_search`` runs (asrdecode.models.sherpa_nemo_search, C++ engine).

End to end (``--sections e2e``, ``--e2e-clips`` 60 by default): audio in, words out, on the same
models and waveforms: ours = the registry pipeline (``make_pipeline`` with ``--decoder greedy --compat
sherpa``: front end, onnxruntime encoder, greedy search, text), sherpa-onnx = its whole recognise
(``greedy_search``); per clip (one ``decode_stream`` / one pipeline call each) and batched (all clips in
one ``decode_streams`` / one call). The front end's own rows: our features + encoder against sherpa-onnx's
null-model recognise (its features + the same encoder + an always-blank 3-token joiner: an upper bound on its front
end + encoder), the whole pipeline on ``fbank="knf"`` (kaldi-native-fbank's own fbank), our features alone and kaldi-native-fbank's ``OnlineFbank`` on the same clips (our
front end before models/spectral.py; the C++ class sherpa-onnx runs). Ratios are sherpa-onnx / ours, from one run.

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/vs_sherpa.py [--repeats 3] [--stat min] [--clips 10]
        [--sections decode e2e] [--e2e-clips 60]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))
from sherpa_models import build_icefall, build_nemo  # noqa: E402
from timing import markdown_table, single_thread, time_many  # noqa: E402

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models.onnx_transducer import KaldiFbankFrontEnd, load_onnx_transducer  # noqa: E402
from asrdecode.models.sherpa_nemo_search import nemo_beam_search  # noqa: E402
from asrdecode.models.sherpa_search import modified_beam_search  # noqa: E402
from asrdecode.native.transducer_greedy_lstm import (greedy_lstm, greedy_stateless,  # noqa: E402
                                                      weights_from_icefall_onnx, weights_from_nemo_onnx)
from asrdecode.transducer import beam_search, greedy  # noqa: E402


def _recognizer(sherpa, d: Path, layout: str, method: str):
    return sherpa.OfflineRecognizer.from_transducer(
        str(d / "encoder.onnx"), str(d / "decoder.onnx"), str(d / "joiner.onnx"), str(d / "tokens.txt"),
        num_threads=1, decoding_method=method, max_active_paths=4,
        model_type="transducer" if layout == "icefall" else "nemo_transducer")


def _sherpa_run(rec, waves, batched: bool) -> None:
    streams = []
    for w in waves:
        s = rec.create_stream()
        s.accept_waveform(16000, w)
        streams.append(s)
        if not batched:
            rec.decode_stream(s)
    if batched:
        rec.decode_streams(streams)


def _sherpa_best(rec, waves) -> list[list[str]]:
    """sherpa-onnx's best tokens per clip (all clips in one call)."""
    streams = []
    for w in waves:
        s = rec.create_stream()
        s.accept_waveform(16000, w)
        streams.append(s)
    rec.decode_streams(streams)
    return [list(s.result.tokens) for s in streams]


def _nemo_compat_beam(fns: dict, b, encs, enc_all, len_all, rec, np_waves) -> None:
    """NeMo layout: ``--compat sherpa --decoder beam`` (sherpa-onnx's NeMo modified beam search, the
    C++ engine); prints how many clips' best tokens equal sherpa-onnx's and the torch engine's. This
    model's ``per_feature`` features differ from sherpa-onnx's on some clips (tests/models/test_sherpa_onnx.py
    test_nemo_per_feature_agreement), so some clips differ before the search; the same model without
    normalisation agrees on 60/60 with either engine (measured 2026-11-25)."""
    kw = dict(beam=4, unk_id=b.model.unk_id)
    nat = nemo_beam_search(b.model, enc_all, len_all, engine="native", **kw)
    ref = nemo_beam_search(b.model, enc_all, len_all, engine="torch", **kw)
    pieces = [p.replace("\u2581", " ") for p in b.tokenizer.pieces]
    theirs = _sherpa_best(rec, np_waves)
    print(f"nemo compat beam 4 (native) best tokens equal to sherpa-onnx's (per_feature features) on "
          f"{sum([pieces[i] for i in x[0].tokens] == y for x, y in zip(nat, theirs))}/{len(nat)}, "
          f"to the torch engine's on {sum(x[0].tokens == y[0].tokens for x, y in zip(nat, ref))}/{len(nat)}")
    fns["ours sherpa-nemo beam 4 per utt"] = lambda: [nemo_beam_search(b.model, e, n, engine="native", **kw)
                                                      for e, n in encs]
    fns["ours sherpa-nemo beam 4 batched"] = lambda: nemo_beam_search(b.model, enc_all, len_all, engine="native", **kw)


def _pipeline_tokens(b, pipe, waves) -> list[list[str]]:
    """Our pipeline's best tokens per clip (one call per clip), as sherpa-onnx spells them."""
    pieces = [p.replace("\u2581", " ") for p in b.tokenizer.pieces]
    return [[pieces[i] for i in pipe.decode(*pipe.encode([w]))[0].tokens] for w in waves]


def _knf_features(opts, waves: list) -> list:
    """kaldi-native-fbank's ``OnlineFbank`` on each clip, frames read back one by one (asrdecode's front end
    before models/spectral.py; sherpa-onnx runs the same C++ class)."""
    import kaldi_native_fbank as knf

    out = []
    for w in waves:
        f = knf.OnlineFbank(opts)
        f.accept_waveform(16000, w)
        f.input_finished()
        out.append(np.stack([np.asarray(f.get_frame(i), dtype=np.float32) for i in range(f.num_frames_ready)]))
    return out


def _end_to_end(sherpa, models: dict, nulls: dict, waves: list, args) -> list[list]:
    """Rows of the end-to-end section (features + encoder + greedy search) for each layout; prints how
    many clips' tokens equal sherpa-onnx's (a check that both did the same work)."""
    from asrdecode.pipeline import make_pipeline, resolve_options

    np_waves = [w.numpy() for w in waves]
    rows = []
    for layout, d in models.items():
        b = load_onnx_transducer(str(d))  # our defaults; --compat sherpa makes the search sherpa-onnx's
        knf_opts = (KaldiFbankFrontEnd(b.feature_dim) if layout == "icefall" else b._front).opts
        pipe = make_pipeline(b, resolve_options(b, {"decoder": "greedy", "compat": "sherpa"}))
        bk = load_onnx_transducer(str(d), fbank="knf")  # kaldi-native-fbank's own fbank: sherpa-onnx's bits
        pipe_knf = make_pipeline(bk, resolve_options(bk, {"decoder": "greedy", "compat": "sherpa"}))
        rec = _recognizer(sherpa, d, layout, "greedy_search")
        null = _recognizer(sherpa, nulls[layout], layout, "greedy_search")
        same = sum(x == y for x, y in zip(_pipeline_tokens(b, pipe, waves), _sherpa_best(rec, np_waves)))
        print(f"{layout}: end-to-end greedy tokens equal to sherpa-onnx's on {same}/{len(waves)}")
        fns = {
            "ours whole per clip": lambda pipe=pipe: [pipe.decode(*pipe.encode([w])) for w in waves],
            "ours whole batched": lambda pipe=pipe: pipe.decode(*pipe.encode(waves)),
            "ours knf per clip": lambda pipe_knf=pipe_knf: [pipe_knf.decode(*pipe_knf.encode([w])) for w in waves],
            "ours knf batched": lambda pipe_knf=pipe_knf: pipe_knf.decode(*pipe_knf.encode(waves)),
            "sherpa whole per clip": lambda rec=rec: _sherpa_run(rec, np_waves, False),
            "sherpa whole batched": lambda rec=rec: _sherpa_run(rec, np_waves, True),
            "ours front per clip": lambda b=b: [b.encode_features(*b.features([w])) for w in waves],
            "ours front batched": lambda b=b: b.encode_features(*b.features(waves)),
            "sherpa front per clip": lambda null=null: _sherpa_run(null, np_waves, False),
            "sherpa front batched": lambda null=null: _sherpa_run(null, np_waves, True),
            "ours features per clip": lambda b=b: [b.features([w]) for w in waves],
            "ours features batched": lambda b=b: b.features(waves),
            "knf features": lambda knf_opts=knf_opts: _knf_features(knf_opts, np_waves),
        }
        t = time_many(fns, repeats=args.repeats, stat=args.stat)
        for mode in ("per clip", "batched"):
            for what, label in (("whole", "features + encoder + greedy"),
                                ("front", "features + encoder (sherpa-onnx: null-model recognise)")):
                ours, theirs = t[f"ours {what} {mode}"], t[f"sherpa {what} {mode}"]
                rows.append([layout, mode, label, ours, theirs, theirs / ours])
            sh = t[f"sherpa whole {mode}"]
            rows.append([layout, mode, "features + encoder + greedy, fbank='knf'", t[f"ours knf {mode}"], sh,
                         sh / t[f"ours knf {mode}"]])
            rows.append([layout, mode, "our features alone", t[f"ours features {mode}"], "", ""])
        rows.append([layout, "per clip", "kaldi-native-fbank OnlineFbank (our features before)", t["knf features"], "",
                     ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--stat", choices=("min", "median"), default="min",
                    help="per-function statistic over the repeats (min: robust to load spikes on a shared machine)")
    ap.add_argument("--sherpa-repeats", type=int, default=15,
                    help="repeats of sherpa-onnx's greedy and null-model runs (cheap; their difference is the estimate)")
    ap.add_argument("--clips", type=int, default=10, help="clips of the decode-only section")
    ap.add_argument("--e2e-clips", type=int, default=60, help="clips of the end-to-end section")
    ap.add_argument("--sections", nargs="+", choices=("decode", "e2e"), default=["decode", "e2e"])
    args = ap.parse_args()
    import sherpa_onnx

    single_thread()
    all_clips = sorted((ROOT / "data/real").glob("*.wav")) + sorted((ROOT / "data/synth_test").glob("*.wav"))
    clips = all_clips[: args.clips]
    waves = [read_audio(c) for c in clips]
    np_waves = [w.numpy() for w in waves]
    tmp = Path(tempfile.mkdtemp(prefix="vs-sherpa-"))
    models = {"icefall": build_icefall(tmp / "icefall", dim=512, emb=512),
              "nemo-rnnt": build_nemo(tmp / "nemo", vocab=1024, enc_dim=512, hidden=640, joint=640)}
    nulls = {"icefall": build_icefall(tmp / "icefall-null", dim=512, emb=8, vocab=8, blank_bias=100.0),
             "nemo-rnnt": build_nemo(tmp / "nemo-null", vocab=3, enc_dim=512, hidden=8, joint=8, blank_bias=100.0)}
    rows = []
    for layout, d in (models.items() if "decode" in args.sections else ()):
        compat = "sherpa" if layout == "icefall" else "blank"
        b = load_onnx_transducer(str(d), start_context=compat, unk_as_blank="max" if layout == "icefall" else None)
        ms = 1 if layout == "icefall" else 10
        feats = [b.features([w]) for w in waves]
        encs = [b.encode_features(*f) for f in feats]
        fb, fl = b.features(waves)
        enc_all, len_all = b.encode_features(fb, fl)
        null = _recognizer(sherpa_onnx, nulls[layout], layout, "greedy_search")
        fns = {"front per utt": lambda null=null: _sherpa_run(null, np_waves, False),
               "front batched": lambda null=null: _sherpa_run(null, np_waves, True)}
        recs = {m: _recognizer(sherpa_onnx, d, layout, m) for m in ("greedy_search", "modified_beam_search")}
        for m, rec in recs.items():
            fns[f"sherpa {m} per utt"] = lambda rec=rec: _sherpa_run(rec, np_waves, False)
            fns[f"sherpa {m} batched"] = lambda rec=rec: _sherpa_run(rec, np_waves, True)
        fns["ours greedy per utt"] = lambda b=b, encs=encs, ms=ms: [greedy(b.model, e, n, max_symbols=ms)
                                                                    for e, n in encs]
        fns["ours greedy batched"] = lambda b=b, enc_all=enc_all, len_all=len_all, ms=ms: greedy(
            b.model, enc_all, len_all, max_symbols=ms)
        # the modified beam search counts <unk> as blank itself: a model without the fold
        plain = load_onnx_transducer(str(d), start_context="sherpa").model if layout == "icefall" else b.model
        if layout == "icefall":
            fns["ours modified beam 4 per utt"] = lambda encs=encs, plain=plain: [modified_beam_search(
                plain, e, n, beam=4, unk_id=plain.unk_id, context_size=2, engine="torch") for e, n in encs]
        # the C++ modified beam search (networks from the ONNX initializers, one call per batch); icefall:
        # length-normalised choice as sherpa-onnx's; NeMo: raw score (sherpa-onnx's NeMo search picks so)
        beam_kw = dict(beam=4, unk_id=plain.unk_id, context_size=2 if layout == "icefall" else 0,
                       length_norm=layout == "icefall")
        nat_b = modified_beam_search(plain, enc_all, len_all, engine="native", **beam_kw)
        ref_b = modified_beam_search(plain, enc_all, len_all, engine="torch", **beam_kw)
        print(f"{layout}: native modified beam 4 best equal to the Python search on "
              f"{sum(x[0].tokens == y[0].tokens and x[0].timestamps == y[0].timestamps for x, y in zip(nat_b, ref_b))}"
              f"/{len(ref_b)}")
        fns["ours native modified beam 4 per utt"] = lambda kw=beam_kw, encs=encs, plain=plain: [
            modified_beam_search(plain, e, n, engine="native", **kw) for e, n in encs]
        fns["ours native modified beam 4 batched"] = lambda kw=beam_kw, enc_all=enc_all, len_all=len_all, \
                plain=plain: modified_beam_search(
            plain, enc_all, len_all, engine="native", **kw)
        # the C++ greedy (prediction network + joint from the ONNX initializers)
        if layout != "icefall":
            w = weights_from_nemo_onnx(d / "decoder.onnx", d / "joiner.onnx", b.blank_id, b.model.vocab_size)
            run = lambda e, n, w=w, ms=ms: greedy_lstm(w, e, n, max_symbols=ms)  # noqa: E731
        else:
            w = weights_from_icefall_onnx(d / "decoder.onnx", d / "joiner.onnx", b.blank_id, b.model.vocab_size, 2)
            run = lambda e, n, w=w, b=b, ms=ms: greedy_stateless(w, e, n, max_symbols=ms, start_context="sherpa",  # noqa: E731
                                                     unk_id=b.model.unk_id)
        assert w is not None
        nat, ref = run(enc_all, len_all), greedy(b.model, enc_all, len_all, max_symbols=ms)
        print(f"{layout}: native greedy equal to the onnxruntime path on "
              f"{sum(x.tokens == y.tokens and x.timestamps == y.timestamps for x, y in zip(nat, ref))}/{len(ref)}")
        fns["ours native greedy per utt"] = lambda run=run, encs=encs: [run(e, n) for e, n in encs]
        fns["ours native greedy batched"] = lambda run=run, enc_all=enc_all, len_all=len_all: run(enc_all, len_all)
        if layout != "icefall":
            _nemo_compat_beam(fns, b, encs, enc_all, len_all, recs["modified_beam_search"], np_waves)
        fns["ours ALSD++ beam 4 per utt"] = lambda b=b, encs=encs, ms=ms: [
            beam_search(b.model, e, n, beam=4, max_symbols=ms) for e, n in encs]
        fns["ours ALSD++ beam 4 batched"] = lambda b=b, enc_all=enc_all, len_all=len_all, ms=ms: beam_search(
            b.model, enc_all, len_all, beam=4, max_symbols=ms)
        t = time_many(fns, repeats=args.repeats, stat=args.stat)
        # sherpa-onnx's greedy decode is a small difference of two larger times (whole - null model):
        # those two again, --sherpa-repeats more times each, interleaved; with --stat min the fastest of all
        cheap = {k: fns[k] for k in fns if k.startswith("front") or "greedy_search" in k}
        again = time_many(cheap, repeats=args.sherpa_repeats, warmup=0, stat=args.stat)
        t.update({k: min(t[k], again[k]) if args.stat == "min" else again[k] for k in cheap})
        for mode in ("per utt", "batched"):
            fr = t[f"front {mode}"]
            for ours_name, theirs in (("greedy", "greedy_search"), ("native greedy", "greedy_search"),
                                      ("ALSD++ beam 4", "modified_beam_search"),
                                      ("modified beam 4", "modified_beam_search"),
                                      ("native modified beam 4", "modified_beam_search"),
                                      ("sherpa-nemo beam 4", "modified_beam_search")):
                key = f"ours {ours_name} {mode}"
                if key not in t:
                    continue
                sh = t[f"sherpa {theirs} {mode}"]
                sh_dec = max(sh - fr, 1e-9)
                rows.append([layout, mode, f"{ours_name} vs {theirs}", t[key], sh_dec, sh_dec / t[key], sh, fr])
    if "decode" in args.sections:
        print(f"{len(waves)} clips, {sum(w.numel() for w in waves) / 16000:.1f} s of audio, one thread, {args.stat} of "
              f"{args.repeats}")
        print(markdown_table(["layout", "mode", "search (ours vs sherpa-onnx)", "ours decode s",
                              "sherpa decode s", "sherpa / ours", "sherpa whole s", "sherpa null-model s"], rows))
    if "e2e" in args.sections:
        e2e_waves = [read_audio(c) for c in all_clips[: args.e2e_clips]]
        e2e = _end_to_end(sherpa_onnx, models, nulls, e2e_waves, args)
        print(f"end to end: {len(e2e_waves)} clips, {sum(w.numel() for w in e2e_waves) / 16000:.1f} s of audio, "
              f"one thread, {args.stat} of {args.repeats}")
        print(markdown_table(["layout", "mode", "what", "ours s", "sherpa-onnx s", "sherpa / ours"], e2e))


if __name__ == "__main__":
    main()
