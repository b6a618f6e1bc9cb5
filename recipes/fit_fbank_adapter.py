#!/usr/bin/env python3
"""Recipe: fit the front-end adapter ``export-onnx`` puts in front of the demo encoder for sherpa-onnx.

sherpa-onnx feeds a NeMo transducer its own fbank (``NemoFbankFrontEnd``), not the log-mel the demo models
were trained on; :class:`asrdecode.models.fbank_adapter.FbankAdapter` maps the one to (an approximation of)
the other. Fitting, on synthetic training speech (``synthesize.py`` output: training voices only, none of
the test voices or sentences):

1. least squares from sherpa-onnx's frames ``t .. t + 2`` (log fbank, 3 x 80 + bias) to our log-mel frame ``t``;
2. starting there, Adam on the whole adapter (linear map + residual branch) so that the frozen demo encoder
   (shared by demo-ctc, demo-rnnt and demo-tdt) gives on the adapted features the output it gives on our
   log-mel (mean squared error over the valid 80 ms frames); the last 10% of the utterances are held out.

Writes ``src/asrdecode/models/assets/fbank-adapter.pt`` (float16, ~0.3 MB) with a record of the fit.

Usage (the bundled adapter; the venv's python, which has torch and kaldi-native-fbank):
    python3 recipes/synthesize.py --split train --num 1000 --voices wide --seed 7 --out work/synth/adapter_wide
    python3 recipes/synthesize.py --split train --num 1000 --voices base --seed 8 --out work/synth/adapter_base
    python recipes/fit_fbank_adapter.py work/synth/adapter_wide work/synth/adapter_base [--epochs 15]
Run time: about 8 min on 2 cores for 2,000 utterances (1.7 h) and 15 epochs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from asrdecode.audio import read_audio  # noqa: E402
from asrdecode.models import load_bundle  # noqa: E402
from asrdecode.models.fbank_adapter import ADAPTER_ASSET, ADAPTER_CONTEXT, FbankAdapter, save_fbank_adapter  # noqa: E402
from asrdecode.models.frontend import LogMelFrontEnd  # noqa: E402
from asrdecode.models.nemo_onnx import NemoFbankFrontEnd  # noqa: E402

Item = tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # sherpa fbank [T', 80], our log-mel [T, 80], encoder out [T8, D]


def load_items(dirs: list[str], num: int, encoder: torch.nn.Module) -> list[Item]:
    """The first ``num`` wavs of each directory -> (sherpa-onnx's fbank, our log-mel, the encoder's output on ours)."""
    theirs, ours = NemoFbankFrontEnd(80, ""), LogMelFrontEnd()
    items = []
    for d in dirs:
        for p in sorted(Path(d).glob("*.wav"))[:num]:
            w = read_audio(p)
            x, y = theirs.fbank(w), ours.log_mel(w)
            if y.shape[0] == 0:
                continue
            with torch.no_grad():
                e, _ = encoder(y.unsqueeze(0), torch.tensor([y.shape[0]]))
            items.append((x, y, e[0]))
    return items


def context(x: torch.Tensor, frames: int) -> torch.Tensor:
    """``x [T', 80]`` -> ``[frames, ADAPTER_CONTEXT * 80 + 1]``: frames ``t .. t + 2`` side by side, then a 1."""
    cols = [x[k:k + frames] for k in range(ADAPTER_CONTEXT)]
    return torch.cat(cols + [torch.ones(frames, 1, dtype=x.dtype)], 1)


def least_squares(items: list[Item], ridge: float = 1e-4) -> torch.Tensor:
    """Ridge least squares from sherpa-onnx's context frames to our log-mel: ``[3 * 80 + 1, 80]``."""
    gram, cross = None, None
    for x, y, _ in items:
        z = context(x.double(), y.shape[0])
        g, c = z.T @ z, z.T @ y.double()
        gram, cross = (g, c) if gram is None else (gram + g, cross + c)
    assert gram is not None and cross is not None
    reg = ridge * torch.diag(gram).mean() * torch.eye(gram.shape[0], dtype=gram.dtype)
    reg[-1, -1] = 0.0  # the bias is not shrunk
    return torch.linalg.solve(gram + reg, cross).float()


def batch_loss(adapter: FbankAdapter, encoder: torch.nn.Module, items: list[Item]) -> torch.Tensor:
    """Mean squared error between the encoder's output on the adapted features and on ours."""
    x = torch.zeros(len(items), max(i[0].shape[0] for i in items), 80)
    for b, (xi, _, _) in enumerate(items):
        x[b, : xi.shape[0]] = xi
    feats, n = adapter(x, torch.tensor([i[0].shape[0] for i in items]))
    enc, _ = encoder(feats, n)
    err = sum(((enc[b, : e.shape[0]] - e) ** 2).sum() for b, (_, _, e) in enumerate(items))
    return err / sum(e.numel() for _, _, e in items)


def train(adapter: FbankAdapter, encoder: torch.nn.Module, train_items: list[Item], held: list[Item],
          epochs: int, lr: float, batch: int = 16) -> list[float]:
    """Adam with a one-cycle schedule; returns the held-out loss after each epoch."""
    ordered = sorted(train_items, key=lambda i: i[0].shape[0])
    batches = [ordered[i:i + batch] for i in range(0, len(ordered), batch)]
    opt = torch.optim.Adam(adapter.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * len(batches))
    order = torch.Generator().manual_seed(0)
    curve = []
    for ep in range(epochs):
        t0 = time.time()
        for j in torch.randperm(len(batches), generator=order).tolist():
            loss = batch_loss(adapter, encoder, batches[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        curve.append(held_out(adapter, encoder, held))
        print(f"epoch {ep + 1}/{epochs}: held-out MSE {curve[-1]:.6f} ({time.time() - t0:.0f} s)", flush=True)
    return curve


def held_out(adapter: FbankAdapter, encoder: torch.nn.Module, held: list[Item]) -> float:
    with torch.no_grad():
        losses = [batch_loss(adapter, encoder, held[i:i + 16]).item() for i in range(0, len(held), 16)]
    return sum(losses) / max(1, len(losses))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("dirs", nargs="+", help="directories of 16 kHz training wavs (synthesize.py --split train)")
    ap.add_argument("--num", type=int, default=1000, help="wavs per directory")
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--out", default=str(ADAPTER_ASSET))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    encoder = load_bundle("demo-rnnt").encoder.eval()  # demo-ctc / -rnnt / -tdt share these weights
    for p in encoder.parameters():
        p.requires_grad_(False)
    t0 = time.time()
    items = load_items(args.dirs, args.num, encoder)
    cut = len(items) - max(1, len(items) // 10)
    print(f"{len(items)} utterances ({sum(i[1].shape[0] for i in items) / 360000:.2f} h) in {time.time() - t0:.0f} s")
    adapter = FbankAdapter(args.hidden)
    adapter.set_linear(least_squares(items[:cut]))
    start = held_out(adapter, encoder, items[cut:])
    print(f"least squares: held-out MSE {start:.6f}", flush=True)
    curve = train(adapter, encoder, items[:cut], items[cut:], args.epochs, args.lr)
    fit = {"dirs": args.dirs, "utterances": len(items), "held_out": len(items) - cut, "epochs": args.epochs,
           "lr": args.lr, "least_squares_mse": start, "held_out_mse": curve}
    save_fbank_adapter(adapter.eval(), args.out, fit)
    print(f"wrote {args.out} (held-out MSE {start:.6f} -> {curve[-1]:.6f}; "
          f"{'finite' if all(math.isfinite(c) for c in curve) else 'NOT finite'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
