#!/usr/bin/env python3
"""Recipe step 2d: simulate the front end's output from text, to train on far more sentences.

The demo models read hama's phone log-probs (20 ms frames). Computing them needs speech (TTS) and
hama (~13x real time), so real features exist for a few thousand utterances only, and models
trained on them overfit. This module learns, from those real features, how hama's output looks
and errs, and then produces new feature sequences for any sentence of the text corpus:

1. **Token errors.** The greedy phone sequence of each real utterance (argmax, repeats and blanks
   removed) is aligned by edit distance to the reference phones (words -> hama G2P lexicon,
   ``<wb>`` between words). The counts give, per reference phone, a substitution distribution and
   a deletion probability, and an insertion rate with a distribution of inserted phones.
2. **Timing.** Histograms of how many frames a phone's spike lasts and how many blank frames
   lead, separate and trail the spikes.
3. **Frame shapes.** A bank of real frames (full 191-way log-prob vectors) grouped by their
   argmax: a simulated frame whose argmax must be ``p`` is a real frame whose argmax was ``p``.

``PhoneSimulator.sample(phones)`` then draws errors, timing and frames for a reference phone
sequence: a feature sequence ``[T20, 191]`` as the real front end would give, with realistic
errors. ``recipes/train.py --simulate`` mixes such utterances with real ones.

Usage (estimate and save the statistics):
    python3 recipes/phone_sim.py --features work/synth/train/features.pt \
        --lexicon work/lexicon/hama.lex --out work/lexicon/sim_stats.pt
Run time: ~1 min for 3,000 utterances.
"""

from __future__ import annotations

import argparse
import random
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import torch

BLANK = 190  # hama's <blank>
WB = 189  # hama's <wb> (word boundary)
DIM = 191
_SPIKE_MAX, _GAP_MAX, _EDGE_MAX = 8, 30, 60


def read_phone_lexicon(path: str | Path, symbols: Sequence[str]) -> dict[str, list[int]]:
    """``word phone...`` lines -> ``{word: [hama token ids]}`` (first entry of a word wins)."""
    index = {s: i for i, s in enumerate(symbols)}
    lex: dict[str, list[int]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if len(fields) >= 2 and all(p in index for p in fields[1:]):
            lex.setdefault(fields[0], [index[p] for p in fields[1:]])
    return lex


def reference_phones(text: str, lexicon: dict[str, list[int]]) -> Optional[list[int]]:
    """Phone ids of a sentence with ``<wb>`` between words; ``None`` if a word has no entry."""
    out: list[int] = []
    for i, word in enumerate(text.split()):
        if word not in lexicon:
            return None
        if i:
            out.append(WB)
        out.extend(lexicon[word])
    return out


def _runs(argmax: list[int]) -> list[tuple[int, int]]:
    """Run-length encoding ``[(token, frames), ...]`` of a frame-level argmax path."""
    runs: list[tuple[int, int]] = []
    for a in argmax:
        if runs and runs[-1][0] == a:
            runs[-1] = (a, runs[-1][1] + 1)
        else:
            runs.append((a, 1))
    return runs


def align(ref: list[int], hyp: list[int]) -> list[tuple[Optional[int], Optional[int]]]:
    """Minimum edit-distance alignment: pairs ``(ref, hyp)``; ``None`` marks an insertion/deletion."""
    n, m = len(ref), len(hyp)
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        ri, row, prev = ref[i - 1], d[i], d[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j - 1] + (ri != hyp[j - 1]), prev[j] + 1, row[j - 1] + 1)
    pairs: list[tuple[Optional[int], Optional[int]]] = []
    i, j = n, m
    while i or j:
        if i and j and d[i][j] == d[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            pairs.append((ref[i - 1], hyp[j - 1]))
            i, j = i - 1, j - 1
        elif i and d[i][j] == d[i - 1][j] + 1:
            pairs.append((ref[i - 1], None))
            i -= 1
        else:
            pairs.append((None, hyp[j - 1]))
            j -= 1
    return pairs[::-1]


def estimate(feats: list[torch.Tensor], texts: list[str], lexicon: dict[str, list[int]],
             bank_per_token: int = 1500, bank_blank: int = 20000, seed: int = 0) -> dict:
    """Statistics of the real front end from utterances ``feats[i] [T20, 191]`` of ``texts[i]``."""
    rng = random.Random(seed)
    sub = torch.zeros(DIM, DIM)  # counts ref -> hyp (diagonal: correct)
    dele = torch.zeros(DIM)
    ins = torch.zeros(DIM)
    slots = 0  # insertion opportunities (ref tokens + 1 per utterance)
    spike = torch.zeros(_SPIKE_MAX + 1)
    gap = torch.zeros(_GAP_MAX + 1)
    lead = torch.zeros(_EDGE_MAX + 1)
    trail = torch.zeros(_EDGE_MAX + 1)
    frames_by_token: dict[int, list[torch.Tensor]] = {}
    seen: Counter[int] = Counter()
    used = 0
    for f, text in zip(feats, texts):
        ref = reference_phones(text, lexicon)
        if ref is None or f.shape[0] == 0:
            continue
        used += 1
        lp = f.float()
        am = lp.argmax(-1).tolist()
        runs = _runs(am)
        hyp = [t for t, _ in runs if t != BLANK]
        for r, h in align(ref, hyp):
            if r is None:
                ins[h] += 1
            elif h is None:
                dele[r] += 1
            else:
                sub[r, h] += 1
        slots += len(ref) + 1
        # timing
        blank_before = 0
        first = True
        for t, n in runs:
            if t == BLANK:
                blank_before = n
                continue
            spike[min(n, _SPIKE_MAX)] += 1
            if first:
                lead[min(blank_before, _EDGE_MAX)] += 1
                first = False
            else:
                gap[min(blank_before, _GAP_MAX)] += 1
            blank_before = 0
        if not first:
            trail[min(blank_before if runs[-1][0] == BLANK else 0, _EDGE_MAX)] += 1
        # frame bank: reservoir sampling per argmax token
        for t_idx, a in enumerate(am):
            seen[a] += 1
            cap = bank_blank if a == BLANK else bank_per_token
            bucket = frames_by_token.setdefault(a, [])
            if len(bucket) < cap:
                bucket.append(lp[t_idx].half())
            else:
                k = rng.randrange(seen[a])
                if k < cap:
                    bucket[k] = lp[t_idx].half()
    tokens = sorted(frames_by_token)
    bank = torch.stack([x for t in tokens for x in frames_by_token[t]])
    starts, counts, pos = torch.zeros(DIM, dtype=torch.long), torch.zeros(DIM, dtype=torch.long), 0
    for t in tokens:
        starts[t], counts[t] = pos, len(frames_by_token[t])
        pos += len(frames_by_token[t])
    return {"sub": sub, "del": dele, "ins": ins, "slots": slots, "spike": spike, "gap": gap,
            "lead": lead, "trail": trail, "bank": bank, "bank_start": starts, "bank_count": counts,
            "utterances": used}


class PhoneSimulator:
    """Draws front-end feature sequences ``[T20, 191]`` (log-probs) for reference phone sequences.

    Args:
        stats: the output of :func:`estimate`.
        error_scale: multiplies the substitution, deletion and insertion rates (1.0: as measured).
        seed: random seed.
    """

    def __init__(self, stats: dict, error_scale: float = 1.0, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.gen = torch.Generator().manual_seed(seed)
        sub = stats["sub"].clone()
        rows = sub.sum(1)
        correct = sub.diagonal().clone()
        errors = rows - correct
        # substitution probability per reference phone, shrunk towards the global rate for rare phones
        glob = float(errors.sum() / rows.sum().clamp(min=1))
        p_sub = (errors + 20 * glob) / (rows + stats["del"] + 20)
        self.p_sub = (p_sub * error_scale).clamp(max=0.9)
        self.p_del = ((stats["del"] + 20 * float(stats["del"].sum() / (rows + stats["del"]).sum().clamp(min=1)))
                      / (rows + stats["del"] + 20) * error_scale).clamp(max=0.5)
        off = sub.clone()
        off.fill_diagonal_(0)
        off[:, BLANK] = 0
        self.sub_rows = off + 1e-3  # never-seen confusions stay possible but rare
        self.sub_rows.fill_diagonal_(0)
        self.sub_rows[:, BLANK] = 0
        self.sub_rows = self.sub_rows / self.sub_rows.sum(1, keepdim=True)
        self.p_ins = min(0.5, float(stats["ins"].sum()) / max(1, stats["slots"]) * error_scale)
        ins = stats["ins"].clone()
        ins[BLANK] = 0
        self.ins_dist = (ins + 1e-3) / (ins + 1e-3).sum()
        self.spike = stats["spike"] / stats["spike"].sum()
        self.gap = stats["gap"] / stats["gap"].sum()
        self.lead = stats["lead"] / stats["lead"].sum()
        self.trail = stats["trail"] / stats["trail"].sum()
        self.bank = stats["bank"]
        self.bank_start, self.bank_count = stats["bank_start"], stats["bank_count"]

    def _draw(self, probs: torch.Tensor, n: int = 1) -> list[int]:
        return torch.multinomial(probs, n, replacement=True, generator=self.gen).tolist()

    def corrupt(self, ref: list[int]) -> list[int]:
        """Apply substitutions, deletions and insertions to a reference phone sequence."""
        out: list[int] = []
        u = torch.rand(len(ref) * 3 + 1, generator=self.gen).tolist()
        for i, r in enumerate(ref):
            if u[3 * i] < self.p_ins:
                out.append(self._draw(self.ins_dist)[0])
            if u[3 * i + 1] < float(self.p_del[r]):
                continue
            out.append(self._draw(self.sub_rows[r])[0] if u[3 * i + 2] < float(self.p_sub[r]) else r)
        if u[-1] < self.p_ins:
            out.append(self._draw(self.ins_dist)[0])
        return out

    def frames(self, tokens: list[int]) -> list[int]:
        """Frame-level argmax path (blank-separated spikes) for a phone sequence."""
        n = len(tokens)
        spikes = self._draw(self.spike, max(1, n))
        gaps = self._draw(self.gap, max(1, n))
        path = [BLANK] * self._draw(self.lead)[0]
        for i, t in enumerate(tokens):
            if i:
                g = gaps[i]
                if g == 0 and tokens[i - 1] == t:
                    g = 1  # a repeated phone needs a blank between its spikes
                path += [BLANK] * g
            path += [t] * max(1, spikes[i])
        path += [BLANK] * self._draw(self.trail)[0]
        return path

    def features(self, path: list[int]) -> torch.Tensor:
        """Real frames of the bank with the given argmax path -> ``[T20, 191]`` float16 log-probs."""
        ids = torch.tensor(path, dtype=torch.long)
        counts = self.bank_count[ids]
        missing = counts == 0
        # a phone never seen as argmax in the real data: a blank frame with that phone made the argmax
        src = torch.where(missing, BLANK, ids)
        r = torch.rand(len(path), generator=self.gen)
        rows = self.bank_start[src] + (r * self.bank_count[src]).long().clamp(max=self.bank_count[src] - 1)
        out = self.bank[rows].clone()
        if bool(missing.any()):
            idx = missing.nonzero()[:, 0]
            out[idx, ids[idx]] = out[idx, BLANK]
            out[idx, BLANK] = -10.0
        return out

    def sample(self, ref: list[int]) -> torch.Tensor:
        """A simulated feature sequence ``[T20, 191]`` for reference phones ``ref``."""
        return self.features(self.frames(self.corrupt(ref)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--features", default="work/synth/train/features.pt")
    ap.add_argument("--lexicon", default="work/lexicon/hama.lex")
    ap.add_argument("--out", default="work/lexicon/sim_stats.pt")
    ap.add_argument("--dev", type=int, default=150, help="last N utterances are dev: not used")
    args = ap.parse_args()
    import hama

    lex = read_phone_lexicon(args.lexicon, hama.ASRModel().decoder_tokens)
    data = torch.load(args.features)
    feats, texts = data["feats"][: -args.dev], data["text"][: -args.dev]
    stats = estimate(feats, texts, lex)
    torch.save(stats, args.out)
    rows = stats["sub"].sum(1)
    n_ref = float(rows.sum() + stats["del"].sum())
    print(f"{stats['utterances']} utterances; phone error rate of the front end vs G2P: "
          f"sub {float(rows.sum() - stats['sub'].diagonal().sum()) / n_ref:.3f}, "
          f"del {float(stats['del'].sum()) / n_ref:.3f}, ins {float(stats['ins'].sum()) / n_ref:.3f}; "
          f"bank {tuple(stats['bank'].shape)}")


if __name__ == "__main__":
    main()
