#!/usr/bin/env python3
"""Kernels of the LM fusion per call and per beam round: the fused per-state tables against the chain walk.

``BackoffAutomaton.advance`` / ``score_tokens`` read the tables of :mod:`asrdecode.lm._fused`; the walk
(``_advance`` / ``_score_tokens_walk``, the former implementation) is switched in for the "walk" rows by
patching those two methods, so both run in one process on the same inputs. Counted: ATen ops that are
not views (a CUDA launch each, roughly; ``empty`` and wrapped scalars included), via a dispatch mode.

* per call: the bundled token 4-gram (V 257, blank 256), ``advance`` for N = 128 x 16 (the CTC beam's
  batch) and N = 32 x 4 (ALSD++), ``score_tokens`` for 4 tokens per state; the bundled word 3-gram's
  ``WordNGramLM.advance`` (its trie automaton is fused; its word-score walk is not); CPU milliseconds
  per call, the fastest of interleaved repeats (the machine is shared), one thread; states reached by random walks from ``<s>``;
* per round: demo-ctc prefix beam 16 (B=128) and demo-rnnt ALSD++ / AES++ beam 4 (B=32), with the
  token LM, with LM + a phrase boosting tree, and without fusion, the eager tensor engine on the CPU
  over the first ``--clips`` bundled clips tiled to the batch; ops per round (every round has the same
  count: static shapes);
* memory: the fused tables of the bundled LMs next to their structure and dense rows.

    OMP_NUM_THREADS=1 python benchmarks/lm_kernels.py [--clips 4] [--out results.md]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.utils._python_dispatch as dispatch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from asrdecode import ctc  # noqa: E402
from asrdecode.ctc.beam_step import Stepper  # noqa: E402
from asrdecode.lm import BoostingTree, NGramLM  # noqa: E402
from asrdecode.lm._automaton import BackoffAutomaton  # noqa: E402
from asrdecode.lm.word_cache import cached_word_lm  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.models.demo import ASSETS, LM_TUNED  # noqa: E402
from asrdecode.transducer import BeamSearchDecoder  # noqa: E402
from asrdecode.transducer.beam_loop import BeamLoop  # noqa: E402

PHRASES = ["elinor", "marianne", "sense and sensibility", "mrs jennings", "colonel brandon"]


class NonViewOps(dispatch.TorchDispatchMode):
    """Counts the ATen ops that are not views."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if not func.is_view:
            self.n += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def walk() -> Iterator[None]:
    """``advance`` / ``score_tokens`` by the chain walk (the implementation before the fused tables)."""
    adv, st = BackoffAutomaton.advance, BackoffAutomaton.score_tokens

    def advance(self: BackoffAutomaton, states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.ensure_valid()
        return self._advance(states, self.max_chain, self.light_degree)

    def score_tokens(self: BackoffAutomaton, states: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.ensure_valid()
        return self._score_tokens_walk(states, tokens)

    BackoffAutomaton.advance, BackoffAutomaton.score_tokens = advance, score_tokens  # type: ignore[method-assign]
    try:
        yield
    finally:
        BackoffAutomaton.advance, BackoffAutomaton.score_tokens = adv, st  # type: ignore[method-assign]


def ops_of(fn: Callable[[], Any]) -> int:
    with NonViewOps() as c:
        fn()
    return c.n


def reached_states(m: Any, n: int, steps: int = 6) -> torch.Tensor:
    """``n`` states reached by random walks of ``steps`` tokens from the sentence start (LM-weighted)."""
    st = m.initial_states(n)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        sc, nx = m.advance(st)
        tok = torch.multinomial(torch.softmax(sc.double().clamp_min(-1e4), 1), 1, generator=gen).squeeze(1)
        st = nx.gather(1, tok[:, None]).squeeze(1)
    return st


def interleaved_ms(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: min(v) * 1e3 for k, v in times.items()}


def _call_row(name: str, m: Any, n: int, call: Callable[[Any, torch.Tensor, torch.Tensor], Any], repeats: int) -> str:
    """One table row: ops and CPU time of ``call`` on ``n`` reached states, walk and fused."""
    st = reached_states(m, n)
    k = torch.randint(0, m.vocab_size, (n, 4), generator=torch.Generator().manual_seed(2))
    fused_ops = ops_of(lambda: call(m, st, k))
    with walk():
        walk_ops = ops_of(lambda: call(m, st, k))

    def walked() -> Any:
        with walk():
            return call(m, st, k)

    ms = interleaved_ms({"walk": walked, "fused": lambda: call(m, st, k)}, repeats)
    return f"| {name} | {n} | {walk_ops} | {fused_ops} | {ms['walk']:.3f} | {ms['fused']:.3f} |"


def per_call(lines: list[str], repeats: int) -> None:
    tok = load("demo-rnnt").tokenizer
    lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=257, blank_id=256)
    word = cached_word_lm(ASSETS / "word-3gram.arpa.gz", tok, vocab_size=tok.vocab_size, blank_id=tok.blank_id)
    word.ensure_valid()
    lines += ["| call | N | ops walk | ops fused | CPU ms walk | CPU ms fused |", "|---|---|---|---|---|---|"]
    cases: list[tuple[str, Any, int, Callable[[Any, torch.Tensor, torch.Tensor], Any]]] = [
        ("token 4-gram advance", lm, 128 * 16, lambda m, s, k: m.advance(s)),
        ("token 4-gram advance", lm, 32 * 4, lambda m, s, k: m.advance(s)),
        ("token 4-gram score_tokens (4 per state)", lm, 32 * 4, lambda m, s, k: m.score_tokens(s, k)),
        ("word 3-gram advance", word, 128 * 16, lambda m, s, k: m.advance(s)),
        ("word 3-gram advance", word, 32 * 4, lambda m, s, k: m.advance(s)),
    ]
    for name, m, n, call in cases:
        lines.append(_call_row(name, m, n, call, repeats))
    lines += ["", "| LM | structure + dense rows MB | fused tables MB | levels x light degree |", "|---|---|---|---|"]
    for name, a in (("token 4-gram", lm.automaton), ("word 3-gram: trie automaton", word.trie),
                    ("word 3-gram: word automaton", word.word_lm.automaton)):
        fb = a.fused_bytes()
        shape = "walk (too many light arcs)" if a.fused is None else f"{a.fused_levels} x {a.fused_degree}"
        lines.append(f"| {name} | {(a.memory_bytes() - fb) / 2**20:.1f} | {fb / 2**20:.1f} | {shape} |")


def _tile(x: torch.Tensor, lengths: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    reps = -(-batch // x.shape[0])
    return x.repeat(reps, *([1] * (x.dim() - 1)))[:batch].contiguous(), lengths.repeat(reps)[:batch].contiguous()


def per_round(lines: list[str], clips: int) -> None:
    from gpu import demo_outputs

    counts: list[int] = []
    counter = NonViewOps()

    def counting(cls: type, name: str) -> Callable[[], None]:
        original = getattr(cls, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            n0 = counter.n
            out = original(*args, **kwargs)
            counts.append(counter.n - n0)
            return out

        setattr(cls, name, wrapped)
        return lambda: setattr(cls, name, original)

    def row(name: str, fn: Callable[[], Any]) -> None:
        out = []
        for mode in ("walk", "fused"):
            counts.clear()
            with torch.inference_mode(), counter, walk() if mode == "walk" else contextlib.nullcontext():
                fn()
            out.append(f"{max(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}")
        lines.append(f"| {name} | {len(counts)} | {out[0]} | {out[1]} |")

    undo = [counting(BeamLoop, "round"), counting(Stepper, "frame")]
    try:
        lines += ["", "| search | rounds | ops/round walk | ops/round fused |", "|---|---|---|---|"]
        demo, lp_all, len_all = demo_outputs("demo-ctc", clips, ctc_head=True)
        lp, lens = _tile(lp_all, len_all, 128)
        V, blank = lp.shape[-1], demo.blank_id
        w, beta = LM_TUNED["demo-ctc"]
        lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=V, blank_id=blank)
        boost = BoostingTree.from_phrases(PHRASES, demo.tokenizer, 1.0)
        for name, fusion in (("CTC prefix beam 16, B=128, + LM", [(lm, w)]),
                             ("CTC prefix beam 16, B=128, + LM + boosting", [(lm, w), (boost, 1.0)]),
                             ("CTC prefix beam 16, B=128", [])):
            dec = ctc.CTCBeamDecoder(blank, vocab_size=V, beam=16, fusion=fusion, beta=beta if fusion else 0.0,
                                     engine="torch")
            row(name, lambda dec=dec: dec.decode(lp, lens))
        demo, enc_all, len_all = demo_outputs("demo-rnnt", clips, ctc_head=False)
        enc, lens = _tile(enc_all, len_all, 32)
        enc = enc[:, : int(lens.max())].contiguous()
        w, beta = LM_TUNED["demo-rnnt"]
        tok = demo.tokenizer
        lm = NGramLM.from_arpa(ASSETS / "token-4gram.arpa.gz", vocab_size=tok.vocab_size, blank_id=tok.blank_id)
        boost = BoostingTree.from_phrases(PHRASES, tok, 1.0)
        for name, opts in (("ALSD++ beam 4, B=32, + LM", dict(method="alsd", fusion=[(lm, w)], beta=beta)),
                           ("ALSD++ beam 4, B=32, + LM + boosting",
                            dict(method="alsd", fusion=[(lm, w), (boost, 1.0)], beta=beta)),
                           ("AES++ beam 4, B=32, + LM", dict(method="aes", fusion=[(lm, w)], beta=beta)),
                           ("ALSD++ beam 4, B=32", dict(method="alsd"))):
            dec = BeamSearchDecoder(demo.model, beam=4, acceleration="eager", engine="torch", **opts)
            row(name, lambda dec=dec: dec.decode(enc, lens))
    finally:
        for u in undo:
            u()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clips", type=int, default=4, help="bundled clips tiled to the batch (per-round part)")
    p.add_argument("--repeats", type=int, default=40, help="interleaved repeats of each timed call")
    p.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    lines: list[str] = []
    per_call(lines, args.repeats)
    per_round(lines, args.clips)
    head = ["# LM fusion: kernels per call and per round (benchmarks/lm_kernels.py)", "",
            f"`OMP_NUM_THREADS=1 python benchmarks/lm_kernels.py --clips {args.clips} --repeats {args.repeats}`; "
            f"CPU, one thread, torch {torch.__version__}; ops = non-view ATen ops; walk = the former chain walk.", ""]
    text = "\n".join(head + lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
