#!/usr/bin/env python3
"""Recipe step 4: train the demo CTC, RNN-T and TDT models on precomputed front-end features.

All three share one encoder (:class:`asrdecode.models.frontend.MelEncoder`: log-mel, three stride-2
convolutions to 80 ms, 2-layer BiLSTM; ``--frontend hama`` trains the session-1
:class:`~asrdecode.models.frontend.PhoneEncoder` on hama phone log-probs instead). Log-mel
batches get VTLP and SpecAugment. CTC is trained first; RNN-T and TDT start
on the trained CTC encoder (kept frozen, so all three share its weights) with an
:class:`asrdecode.transducer.LSTMTransducer` prediction + joint network, trained with the pure
torch losses of :mod:`asrdecode.training`.

Training is time-boxed (``--minutes``); every ``--eval-every`` steps the greedy WER on a dev set
(the last ``--dev`` utterances of the ``--data`` files read in order: training voices; with the wide corpus
16 of the 150 sentences also occur there, spoken by other voices) and, with ``--test``, on a test
set (logged only) is logged to ``recipes/results/<name>.curve.tsv``. The best-dev checkpoint is written as fp16 to ``<out>.pt``
(CTC also writes the shared ``encoder.pt``; RNN-T / TDT keep that encoder frozen).

Usage (see recipes/run_all.sh for the bundled models' settings):
    python3 recipes/train.py --kind ctc  --minutes 60 --data work/synth/train_wide/logmel.pt \
        work/synth/train/logmel.pt --max-frames 4000 --out src/asrdecode/models/assets/demo-ctc
    python3 recipes/train.py --kind rnnt --minutes 15 --lr 3e-3 ... --out src/asrdecode/models/assets/demo-rnnt
    python3 recipes/train.py --kind tdt  --minutes 15 --lr 3e-3 ... --out src/asrdecode/models/assets/demo-tdt
Run time: the given minutes (``--threads``, default one), plus loading.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from asrdecode.models.demo import build_model, load_encoder_state, save_checkpoint  # noqa: E402
from asrdecode.models.frontend import MEL_DIM  # noqa: E402
from asrdecode.tokenizers import SentencePieceTokenizer  # noqa: E402
from asrdecode.training import rnnt_loss, tdt_loss  # noqa: E402
from phone_sim import PhoneSimulator, read_phone_lexicon, reference_phones  # noqa: E402
from simple_decode import ctc_greedy_ids, transducer_greedy_ids, wer  # noqa: E402


def batches(lengths: list[int], max_frames: int, rng: random.Random) -> list[list[int]]:
    """Length-sorted buckets with at most ``max_frames`` padded frames each, shuffled."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] + rng.random())
    out, cur, longest = [], [], 0
    for i in order:
        longest2 = max(longest, lengths[i])
        if cur and longest2 * (len(cur) + 1) > max_frames:
            out.append(cur)
            cur, longest2 = [], lengths[i]
        cur.append(i)
        longest = longest2
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


_MEL_CENTRES = None


def vtlp(a: torch.Tensor, alpha: float) -> torch.Tensor:
    """Vocal tract length perturbation of one log-mel ``[T10, 80]``: the spectrum scaled in frequency
    by ``alpha`` (bin k takes the energy at ``centre_k / alpha``, interpolated between bins)."""
    global _MEL_CENTRES
    if _MEL_CENTRES is None:
        from asrdecode.models.frontend import _mel_filterbank

        fb = _mel_filterbank(512, a.shape[1], 16000)
        _MEL_CENTRES = (fb * torch.arange(fb.shape[0]).unsqueeze(1)).sum(0) / fb.sum(0)  # FFT-bin units
    c = _MEL_CENTRES
    pos = torch.searchsorted(c, c / alpha).clamp(1, len(c) - 1)  # source position between bins pos-1, pos
    lo, hi = c[pos - 1], c[pos]
    w = ((c / alpha - lo) / (hi - lo)).clamp(0, 1)
    return a[:, pos - 1] * (1 - w) + a[:, pos] * w


def spec_augment(a: torch.Tensor, rng: random.Random) -> torch.Tensor:
    """VTLP (warp 0.88-1.12) and SpecAugment on one log-mel ``[T10, 80]``: 2 frequency masks (<= 12
    bins), 2 time masks (<= 30 frames, <= 10% of the utterance each); masked cells get the
    utterance's bin means."""
    a = vtlp(a, rng.uniform(0.88, 1.12))
    fill = a.mean(0)
    for _ in range(2):
        w = rng.randint(0, 12)
        s = rng.randint(0, a.shape[1] - w)
        a[:, s : s + w] = fill[s : s + w]
    for _ in range(2):
        w = rng.randint(0, min(30, a.shape[0] // 10))
        s = rng.randint(0, max(0, a.shape[0] - w))
        a[s : s + w] = fill
    return a


def collate(feats: list[torch.Tensor], ids: list[list[int]], idx: list[int], train: bool, rng: random.Random):
    f = [feats[i].float() for i in idx]
    lens = torch.tensor([x.shape[0] for x in f])
    x = torch.zeros(len(f), int(lens.max()), f[0].shape[1])
    logmel = f[0].shape[1] == MEL_DIM
    for j, a in enumerate(f):
        if train and logmel:
            a = spec_augment(a, rng)
        elif train:
            a = a.clone()
            # time masks (SpecAugment-like): replace a few short spans by "blank/silence"
            for _ in range(2):
                w = rng.randint(0, min(6, a.shape[0] // 8))
                s = rng.randint(0, max(0, a.shape[0] - w))
                a[s : s + w] = -30.0
                a[s : s + w, -1] = 0.0
            a = a + 0.3 * torch.randn_like(a)
        x[j, : a.shape[0]] = a
    tl = torch.tensor([len(ids[i]) for i in idx])
    tg = torch.zeros(len(idx), max(1, int(tl.max())), dtype=torch.long)
    for j, i in enumerate(idx):
        tg[j, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
    return x, lens, tg, tl


class SimulatedBatches:
    """Batches of simulated front-end features for sentences of a text corpus (``recipes/phone_sim.py``)."""

    def __init__(self, text_path: str, lexicon_path: str, stats_path: str, tok, max_words: int,
                 error_scale: float, seed: int) -> None:
        import hama

        lex = read_phone_lexicon(lexicon_path, hama.ASRModel().decoder_tokens)
        self.items = []
        for line in open(text_path, encoding="utf-8"):
            text = line.strip()
            if not text or len(text.split()) > max_words:
                continue
            ref = reference_phones(text, lex)
            if ref is not None:
                self.items.append((ref, text))
        self.sim = PhoneSimulator(torch.load(stats_path), error_scale=error_scale, seed=seed)
        self.tok = tok
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return len(self.items)

    def batch(self, max_frames: int) -> tuple[list[torch.Tensor], list[list[int]]]:
        """Simulated utterances with at most ``max_frames`` padded 20 ms frames in all."""
        feats, ids, longest = [], [], 0
        while True:
            ref, text = self.items[self.rng.randrange(len(self.items))]
            f = self.sim.sample(ref)
            longest2 = max(longest, f.shape[0])
            if feats and longest2 * (len(feats) + 1) > max_frames:
                return feats, ids
            feats.append(f)
            ids.append(self.tok.encode(text))
            longest = longest2


def evaluate(kind, model, feats, texts, tok, bs=32) -> float:
    model.eval()
    hyps = []
    with torch.no_grad():
        for s in range(0, len(feats), bs):
            idx = list(range(s, min(s + bs, len(feats))))
            x, lens, _, _ = collate(feats, [[0]] * len(feats), idx, False, random.Random(0))
            enc, el = model.encoder(x, lens)
            if kind == "ctc":
                seqs = ctc_greedy_ids(model.ctc_head(enc).log_softmax(-1), el, model.blank_id)
            else:
                seqs = transducer_greedy_ids(model.transducer, enc, el)
            hyps += [tok.decode(q) for q in seqs]
    model.train()
    return wer(texts, hyps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=["ctc", "rnnt", "tdt"], required=True)
    ap.add_argument("--frontend", choices=["logmel", "hama"], default="logmel")
    ap.add_argument("--data", nargs="+", default=None,
                    help="feature files (recipes/features.py); default work/synth/train/logmel.pt or features.pt")
    ap.add_argument("--test", default=None, help="also log the greedy WER on this feature file (not used to choose)")
    ap.add_argument("--tokenizer", default="src/asrdecode/models/assets/tokenizer.model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--encoder", default="src/asrdecode/models/assets/encoder.pt",
                    help="RNN-T/TDT: the trained (CTC) encoder to build on, kept frozen")
    ap.add_argument("--curve-dir", default="recipes/results", help="where <name>.curve.tsv goes")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-frames", type=int, default=None,
                    help="padded feature frames per batch (default 12000 log-mel / 6000 hama frames: ~2 min of audio)")
    ap.add_argument("--dev", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true", help="start from the checkpoint at --out")
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--durations", default="0,1,2,3,4")
    ap.add_argument("--simulate", type=int, default=0,
                    help="simulated batches (recipes/phone_sim.py) per real batch; 0: real features only")
    ap.add_argument("--sim-text", default="work/text/train.txt")
    ap.add_argument("--sim-lexicon", default="work/lexicon/hama.lex")
    ap.add_argument("--sim-stats", default="work/lexicon/sim_stats.pt")
    ap.add_argument("--sim-error-scale", type=float, default=1.0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)

    tok = SentencePieceTokenizer(args.tokenizer)
    if args.data is None:
        args.data = ["work/synth/train/" + ("logmel.pt" if args.frontend == "logmel" else "features.pt")]
    if args.max_frames is None:
        args.max_frames = 12000 if args.frontend == "logmel" else 6000
    feats, texts = [], []
    for path in args.data:
        data = torch.load(path)
        feats += data["feats"]
        texts += data["text"]
    ids = [tok.encode(t) for t in texts]
    n_dev = args.dev
    tr_feats, tr_ids = feats[:-n_dev], ids[:-n_dev]
    dev_feats, dev_texts = feats[-n_dev:], texts[-n_dev:]
    durations = [int(d) for d in args.durations.split(",")] if args.kind == "tdt" else None
    model = build_model(args.kind, tok.vocab_size, tok.blank_id, durations, args.frontend)
    test = None
    if args.test:
        td = torch.load(args.test)
        test = (td["feats"], td["text"])
    if args.resume:
        # continue a run: encoder.pt + this model's head from --out (both written by an earlier run)
        model.encoder.load_state_dict(load_encoder_state(Path(args.out).parent / "encoder.pt"))
        head = torch.load(args.out + ".pt")["state_dict"]
        model.load_state_dict({k: v.float() for k, v in head.items()}, strict=False)
    frozen = args.kind != "ctc"
    if frozen:
        # RNN-T / TDT: on top of the trained CTC encoder, frozen (all three models share it)
        model.encoder.load_state_dict(load_encoder_state(args.encoder))
        model.encoder.requires_grad_(False)
    n_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=1e-2)
    base = [args.lr]
    budget = args.minutes * 60
    curve_path = Path(args.curve_dir) / (Path(args.out).name + ".curve.tsv")
    curve_path.parent.mkdir(parents=True, exist_ok=True)
    curve = open(curve_path, "a" if args.resume else "w")
    if args.resume:
        curve.write("# resumed from the best checkpoint above (step and seconds restart at 0)\n")
    else:
        curve.write("step\tseconds\tepoch\ttrain_loss\tdev_wer" + ("\ttest_wer" if args.test else "") + "\n")
    sim = None
    if args.simulate:
        sim = SimulatedBatches(args.sim_text, args.sim_lexicon, args.sim_stats, tok, 16, args.sim_error_scale, args.seed)
        print(f"simulating from {len(sim)} sentences, {args.simulate} simulated batches per real batch", flush=True)
    print(f"{args.kind}: {n_params} parameters, {len(tr_feats)} train / {n_dev} dev utterances", flush=True)
    t0 = time.time()
    step, epoch, best, run_loss = 0, 0, 9.9, None
    lens20 = [f.shape[0] for f in tr_feats]
    done = False
    while not done:
        epoch += 1
        for idx in batches(lens20, args.max_frames, rng):
            elapsed = time.time() - t0
            if elapsed > budget:
                done = True
                break
            frac = elapsed / budget
            scale = min(1.0, (step + 1) / args.warmup) * (0.05 + 0.95 * 0.5 * (1 + __import__("math").cos(__import__("math").pi * frac)))
            for g, b in zip(opt.param_groups, base):
                g["lr"] = b * scale
            if sim is not None and step % (args.simulate + 1) != 0:
                sf, sids = sim.batch(args.max_frames)
                x, lens, tg, tl = collate(sf, sids, list(range(len(sf))), True, rng)
            else:
                x, lens, tg, tl = collate(tr_feats, tr_ids, idx, True, rng)
            if frozen:
                model.encoder.eval()
                with torch.no_grad():
                    enc, el = model.encoder(x, lens)
            else:
                enc, el = model.encoder(x, lens)
            if args.kind == "ctc":
                lp = model.ctc_head(enc).log_softmax(-1)
                loss = torch.nn.functional.ctc_loss(lp.transpose(0, 1), tg, el, tl, blank=model.blank_id,
                                                    reduction="sum", zero_infinity=True) / tl.sum()
            else:
                tr = model.transducer
                dec, _ = tr.predict_sequence(torch.nn.functional.pad(tg, (1, 0), value=tr.blank_id),
                                             tr.initial_state(tg.shape[0]))
                logits = tr.joint(tr.project_encoder(enc).unsqueeze(2), tr.project_decoder(dec).unsqueeze(1))
                if args.kind == "rnnt":
                    loss = rnnt_loss(logits, tg, el, tl, tr.blank_id, reduction="mean_per_token")
                else:
                    loss = tdt_loss(logits, tg, el, tl, tr.blank_id, tr.durations, reduction="mean_per_token", sigma=0.02)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            step += 1
            v = loss.item()
            run_loss = v if run_loss is None else 0.95 * run_loss + 0.05 * v
            if step % args.eval_every == 0:
                w = evaluate(args.kind, model, dev_feats, dev_texts, tok)
                tw = "" if test is None else f"\t{evaluate(args.kind, model, test[0], test[1], tok):.4f}"
                curve.write(f"{step}\t{time.time() - t0:.0f}\t{epoch}\t{run_loss:.4f}\t{w:.4f}{tw}\n")
                curve.flush()
                print(f"step {step} {time.time() - t0:.0f}s epoch {epoch} loss {run_loss:.3f} dev WER {w:.3f}"
                      + (f" test WER {tw.strip()}" if tw else ""), flush=True)
                if w < best:
                    best = w
                    save_checkpoint(model, args.kind, args.out + ".pt", tok.vocab_size, tok.blank_id, durations)
    w = evaluate(args.kind, model, dev_feats, dev_texts, tok)
    curve.write(f"{step}\t{time.time() - t0:.0f}\t{epoch}\t{run_loss:.4f}\t{w:.4f}\n")
    print(f"final step {step} dev WER {w:.3f} (best {min(best, w):.3f})", flush=True)
    if w <= best:
        save_checkpoint(model, args.kind, args.out + ".pt", tok.vocab_size, tok.blank_id, durations)


if __name__ == "__main__":
    main()
