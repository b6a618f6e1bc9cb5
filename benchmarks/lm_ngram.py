"""Tensor n-gram LM benchmark: ``advance`` throughput, load time and memory, one thread.

Builds two token-level LMs over a 1024-token vocabulary (1023 tokens + blank) with KenLM's lmplz
(``recipes/build_kenlm.sh``) from a synthetic corpus (a first-order Markov source with Zipfian
successors; no data set is downloaded): a 3-gram and a 6-gram, ~0.9-1M n-grams each. Then, in
one process and on the same ARPA files:

* ``advance`` for batch 32 x beam 8 = 256 states (reached by random token walks from ``<s>``),
  ours vs NeMo's ``NGramGPULanguageModel`` (CPU, PyTorch path) when NeMo is importable, and vs
  KenLM's Python module queried token by token (``BaseScore`` for every state and token, the way
  a CPU LM is used without batching) when kenlm is importable; round-robin repeats, medians,
  ratio = peer time / our time (> 1: ours faster). Our scores are checked against NeMo's.
* ``BoostingTree.advance`` with 200 random phrases on the same 256 states, vs our LM advance;
* load time: ARPA -> ours, our binary (``NGramLM.save``) -> ours, ARPA -> NeMo, ARPA -> KenLM;
  ratios against our binary load;
* memory: bytes of our tensors (structure + dense rows), of NeMo's buffers, and the ARPA size.

Run (full table with NeMo and kenlm, both installed in the NeMo venv)::

    OMP_NUM_THREADS=1 /work/venvs/nemo/bin/python benchmarks/lm_ngram.py

``python3 benchmarks/lm_ngram.py`` runs what is installed and says what it skipped.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from asrdecode.lm import BoostingTree, NGramLM, TokenMap, estimate_arpa  # noqa: E402

V, BLANK = 1024, 1023
ROOT = Path(__file__).resolve().parents[1]


def synthetic_corpus(n_tokens: int, seed: int) -> list[list[int]]:
    """Sentences of token ids from a fixed random first-order Markov source (64 Zipfian successors each)."""
    src = np.random.default_rng(0)
    succ = src.integers(0, V - 1, size=(V - 1, 64))
    zipf = 1.0 / np.arange(1, 65) ** 1.1
    zipf /= zipf.sum()
    r = np.random.default_rng(seed)
    out, total = [], 0
    while total < n_tokens:
        n = int(r.integers(5, 40))
        choice = r.choice(64, size=n, p=zipf)
        seq = [int(r.integers(0, V - 1))]
        for i in range(1, n):
            seq.append(int(succ[seq[-1], choice[i]]))
        out.append(seq)
        total += n
    return out


def build_lm(workdir: Path, order: int, n_tokens: int) -> Path:
    path = workdir / f"tok{order}.arpa"
    if not path.exists():
        tm = TokenMap.offset(V, BLANK)
        lines = [tm.encode_line(s) for s in synthetic_corpus(n_tokens, seed=order)]
        estimate_arpa(lines, order, path, memory="1G")
    return path


def timed(fn, repeats: int = 1) -> float:
    best = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best.append(time.perf_counter() - t)
    return min(best)


def load_nemo(path: Path):
    try:
        from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel
    except Exception:  # noqa: BLE001 - any import failure means "no NeMo here"
        return None
    logging.getLogger("nemo_logger").setLevel(logging.ERROR)
    with contextlib.redirect_stderr(io.StringIO()), quiet_fd2():
        return NGramGPULanguageModel.from_arpa(str(path), vocab_size=V - 1)


def walks(n: int, max_len: int, seed: int) -> list[list[int]]:
    """Prefixes of held-out sentences of the same source: realistic, often long, histories."""
    g = np.random.default_rng(seed)
    sents = synthetic_corpus(n * 40, seed=seed)
    return [s[: int(g.integers(0, min(len(s), max_len) + 1))] for s in sents[:n]]


@contextlib.contextmanager
def quiet_fd2():
    """Silence C-level stderr (KenLM's progress bar)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def ours_states(lm: NGramLM, seqs: list[list[int]]) -> torch.Tensor:
    out = []
    for s in seqs:
        st = lm.initial_states(1)
        for t in s:
            st = lm.score_tokens(st, torch.tensor([[t]]))[1][:, 0]
        out.append(st)
    return torch.cat(out)


def nemo_states(nm, seqs: list[list[int]]) -> torch.Tensor:
    out = []
    for s in seqs:
        st = nm.get_init_states(1, bos=True)
        for t in s:
            st = nm.advance(st)[1][:, t]
        out.append(st)
    return torch.cat(out)


def kenlm_states(km, seqs: list[list[int]], tm: TokenMap):
    import kenlm

    out = []
    for s in seqs:
        a, b = kenlm.State(), kenlm.State()
        km.BeginSentenceWrite(a)
        for t in s:
            km.BaseScore(a, tm.word(t), b)
            a, b = b, a
        out.append(a)
    return out


def kenlm_advance(km, states, words) -> np.ndarray:
    import kenlm

    out = np.empty((len(states), len(words)), dtype=np.float32)
    tmp = kenlm.State()
    for i, st in enumerate(states):
        for j, w in enumerate(words):
            out[i, j] = km.BaseScore(st, w, tmp)
    return out


def dense_mib(lm: NGramLM) -> float:
    a = lm.automaton
    return (a.dense_scores.numel() * a.dense_scores.element_size()
            + a.dense_next.numel() * a.dense_next.element_size()) / 2**20


def round_robin(fns: dict[str, callable], repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()  # warm-up
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default=str(ROOT / "build" / "bench_lm"))
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--beam", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--kenlm-states", type=int, default=8, help="states scored token by token with KenLM")
    ap.add_argument("--orders", type=int, nargs="+", default=[3, 6])
    args = ap.parse_args()
    torch.set_num_threads(1)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    n = args.batch * args.beam
    tm = TokenMap.offset(V, BLANK)
    sizes = {3: 2_500_000, 4: 800_000, 5: 450_000, 6: 300_000}
    try:
        import kenlm
    except ImportError:
        kenlm = None
    rows = []
    for order in args.orders:
        arpa = build_lm(workdir, order, sizes.get(order, 300_000))
        binary = workdir / f"tok{order}.lm"
        t_arpa = timed(lambda arpa=arpa: NGramLM.from_arpa(arpa, vocab_size=V, blank_id=BLANK))
        lm = NGramLM.from_arpa(arpa, vocab_size=V, blank_id=BLANK)
        lm.save(binary)
        t_bin = timed(lambda binary=binary: NGramLM.load(binary), repeats=3)
        nm = None
        t_nemo = None
        t0 = time.perf_counter()
        nm = load_nemo(arpa)
        if nm is not None:
            t_nemo = time.perf_counter() - t0
        km = None
        t_kenlm = None
        if kenlm is not None:
            t0 = time.perf_counter()
            with quiet_fd2():
                km = kenlm.Model(str(arpa))
            t_kenlm = time.perf_counter() - t0

        seqs = walks(n, 12, seed=1000 + order)
        st = ours_states(lm, seqs)
        fns = {"ours": lambda lm=lm, st=st: lm.advance(st)}
        check = ""
        if nm is not None:
            sn = nemo_states(nm, seqs)
            ours_sc = lm.advance(st)[0][:, : V - 1]
            diff = float((nm.advance(sn)[0] - ours_sc).abs().max())
            check = f"max |ours - NeMo| = {diff:.2e}"
            fns["nemo"] = lambda nm=nm, sn=sn: nm.advance(sn)
        phrases = [np.random.default_rng(i).integers(0, V - 1, size=int(2 + i % 5)).tolist() for i in range(200)]
        tree = BoostingTree.from_token_sequences(phrases, vocab_size=V, blank_id=BLANK)
        tree_states = tree.initial_states(n)
        walk_tok = torch.tensor([s[0] if s else 0 for s in seqs])
        tree_states = tree.advance(tree_states)[1][torch.arange(n), walk_tok]
        fns["boosting tree (200 phrases)"] = lambda tree=tree, tree_states=tree_states: tree.advance(tree_states)
        med = round_robin(fns, args.repeats)
        t_ken_adv = None
        if km is not None:
            k = min(args.kenlm_states, n)
            ks = kenlm_states(km, seqs[:k], tm)
            words = [tm.word(t) for t in range(V - 1)]
            exp = kenlm_advance(km, ks, words) * np.log(10.0)
            got = lm.advance(st[:k])[0][:, : V - 1].numpy()
            kdiff = float(np.abs(exp - got).max())
            check += ("; " if check else "") + f"max |ours - KenLM| = {kdiff:.2e}"
            t_ken_adv = timed(lambda km=km, ks=ks, words=words: kenlm_advance(km, ks, words)) * n / k  # extrapolated to n states
        rows.append(dict(order=order, lm=lm, arpa=arpa, t_arpa=t_arpa, t_bin=t_bin, t_nemo=t_nemo, t_kenlm=t_kenlm,
                         med=med, t_ken_adv=t_ken_adv, check=check, nm=nm))

    print(f"\n## advance: {n} states (batch {args.batch} x beam {args.beam}) x {V} tokens, one thread\n")
    print("| LM | n-grams | ours ms | M states*tokens/s | NeMo ms | NeMo / ours | KenLM token-by-token ms | KenLM / ours "
          "| boosting tree ms | check |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        o = r["med"]["ours"]
        nemo = r["med"].get("nemo")
        ken = r["t_ken_adv"]
        print(f"| {r['order']}-gram | {sum(r['lm'].num_ngrams):,} | {o * 1e3:.2f} | {n * V / o / 1e6:.0f} | "
              + (f"{nemo * 1e3:.2f} | {nemo / o:.1f}x | " if nemo else "n/a | n/a | ")
              + (f"{ken * 1e3:.0f} | {ken / o:.0f}x | " if ken else "n/a | n/a | ")
              + f"{r['med']['boosting tree (200 phrases)'] * 1e3:.2f} | {r['check'] or 'peers not installed'} |")
    print("\n## load time (ratio = time / our binary load) and memory\n")
    print("| LM | ARPA size | ours from ARPA | ours binary | NeMo from ARPA | KenLM from ARPA | ours memory (of which dense rows, "
          "budget `dense_memory_mb`) | NeMo memory |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = r["t_bin"]
        nm = r["nm"]
        nemo_mem = (sum(t.numel() * t.element_size() for t in list(nm.buffers()) + list(nm.parameters()))
                    if nm is not None else None)

        def cell(t, b=b):
            return f"{t:.2f} s ({t / b:.1f}x)" if t is not None else "n/a"

        print(f"| {r['order']}-gram | {r['arpa'].stat().st_size / 2**20:.0f} MiB | {cell(r['t_arpa'])} | {b:.2f} s (1x) | "
              f"{cell(r['t_nemo'])} | {cell(r['t_kenlm'])} | {r['lm'].memory_bytes() / 2**20:.0f} MiB ({dense_mib(r['lm']):.0f} dense) | "
              + (f"{nemo_mem / 2**20:.0f} MiB |" if nemo_mem else "n/a |"))
    missing = [name for name, ok in (("NeMo", rows and rows[0]["nm"] is not None), ("kenlm", kenlm is not None)) if not ok]
    if missing:
        print(f"\n(not installed here: {', '.join(missing)}; run with /work/venvs/nemo/bin/python for the full table)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
