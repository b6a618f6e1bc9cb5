"""``asrdecode bench``: the quick run writes a sane table and real PNG plots; bad arguments exit 2."""

from __future__ import annotations

import importlib
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from asrdecode import cli
from asrdecode.bench import wind_jumps
from asrdecode.errors import DecodingInputError
from asrdecode.results import Hypothesis
greedy_mod = importlib.import_module("asrdecode.transducer.greedy")  # the module, not the function

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("rtfx_vs_batch.png", "wind_jumps.png", "wer_vs_lm_weight.png")


def _hyp(frames: list[int]) -> Hypothesis:
    return Hypothesis(tokens=[1] * len(frames), timestamps=list(frames), score=0.0)


def test_quick_bench_writes_table_and_plots(capsys, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench"
    assert cli.main(["bench", "--quick", "--quiet", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    table = (out / "bench.md").read_text(encoding="utf-8")
    assert printed == table
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_SIGNATURE, name
        assert len(data) > 5000, name  # axes, labels and data: not an empty canvas
        assert data[12:16] == b"IHDR"
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        assert width >= 300 and height >= 300
    speed = re.findall(r"^\| (demo-\w+) \| ([^|]+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \|$", table, re.M)
    decoders = {d.strip() for _, d, _, _, _ in speed}
    assert {"greedy frame-looping", "greedy label-looping", "label-looping + WIND 8", "ALSD beam 4",
            "CTC greedy", "CTC beam 8"} <= decoders
    assert {int(b) for _, _, b, _, _ in speed} == {1, 4}
    assert len(speed) == 12
    for _, d, _, rtfx, ratio in speed:
        assert float(rtfx) > 0 and float(ratio) > 0, d
        if d.strip() in ("greedy frame-looping", "CTC greedy"):
            assert float(ratio) == 1.0
    jumps = {int(k): int(v) for k, v in re.findall(r"^\| (\d) \| (\d+) \|$", table, re.M)}
    assert jumps and all(0 <= k <= 8 for k in jumps) and sum(jumps.values()) > 8
    lm = re.findall(r"^\| ([\d.]+) \| ([\d.]+) \|$", table.split("WER vs LM weight")[1], re.M)
    assert [float(w) for w, _ in lm] == [0.0, 0.5, 1.0]
    assert all(0 <= float(e) <= 200 for _, e in lm)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batches", "0"], "batch sizes must be >= 1"),
        (["--repeats", "0"], "repeats must be >= 1"),
        (["--lm-weights", "-1"], "LM weights must be finite and >= 0"),
        (["--out", "{file}"], "is not a folder"),
        (["--out", "{missing}/x"], "does not exist"),
    ],
)
def test_bad_arguments_exit_2(capsys, tmp_path: Path, argv: list[str], message: str) -> None:
    a_file = tmp_path / "f.txt"
    a_file.write_text("x")
    argv = [x.format(file=a_file, missing=tmp_path / "nope") for x in argv]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "o")]
    assert cli.main(["bench", "--quick", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("asrdecode: error: ") and message in err
    assert not (tmp_path / "o").exists()


def test_without_matplotlib_the_message_says_so(capsys, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` raise ImportError
    assert cli.main(["bench", "--quick", "--out", str(tmp_path / "o")]) == 2
    assert "needs matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_missing_out_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--quick"])
    assert e.value.code == 2
    assert "--out" in capsys.readouterr().err


def test_wind_jumps_by_hand() -> None:
    # L=20, w=8: label at 3 (3 blanks: one step of 3), label at 3 again (0), label at 13 (10 blanks:
    # 8 + 2), end (7 blanks: one step of 7). Empty utterance of 17 frames: 8 + 8 + 1.
    got = wind_jumps([_hyp([3, 3, 13]), _hyp([])], [20, 17], 8)
    assert got == Counter({3: 1, 0: 1, 8: 3, 2: 1, 7: 1, 1: 1})
    with pytest.raises(DecodingInputError):
        wind_jumps([_hyp([5])], [4], 8)
    with pytest.raises(DecodingInputError):
        wind_jumps([_hyp([1])], [4], 0)


@pytest.fixture(scope="module")
def demo_rnnt_encoded():
    from asrdecode.audio import read_audio
    from asrdecode.bench import DATA
    from asrdecode.evaluate import read_manifest
    from asrdecode.models import load

    demo = load("demo-rnnt")
    entries = read_manifest(DATA / "synth_test" / "manifest.jsonl")[:3] + read_manifest(DATA / "real" / "manifest.jsonl")[:1]
    with torch.inference_mode():
        feats, flen = demo.features([read_audio(e.audio_filepath) for e in entries])
        enc, elen = demo.encode_features(feats, flen)
    return demo.model, enc, elen


@pytest.mark.parametrize("window", [8, 3, 2])
def test_wind_jumps_match_the_decoder_steps(monkeypatch, demo_rnnt_encoded, window: int) -> None:
    """The histogram derived from timestamps equals the window steps the decoder actually takes
    (recorded by wrapping the window step from the outside)."""
    model, enc, lengths = demo_rnnt_encoded
    with torch.inference_mode():
        hyps = greedy_mod.greedy(model, enc, lengths, window=window, acceleration="eager", engine="torch")
        assert sum(len(h.tokens) for h in hyps) > 10
        seen = _observed_steps(model, enc, lengths, window, monkeypatch)
    assert wind_jumps(hyps, lengths.tolist(), window) == seen
    assert seen[0] > 0 and seen[window] > 0


def _observed_steps(model, enc: torch.Tensor, lengths: torch.Tensor, window: int, monkeypatch) -> Counter:
    seen: Counter = Counter()
    inner = greedy_mod._find_label_window_step

    def recording(lp):
        need = (lp.t < lp.lengths).clone()  # every row within its length searches (the step follows an emit)
        before = lp.t.clone()
        inner(lp)
        for adv in (lp.t - before)[need].tolist():
            seen[int(adv)] += 1

    monkeypatch.setattr(greedy_mod, "_find_label_window_step", recording)
    greedy_mod.greedy(model, enc, lengths, window=window, acceleration="eager", engine="torch")
    return seen
