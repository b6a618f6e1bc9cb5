"""Hostile and careless files: every one gets a named error (the library's FileFormatError naming
the file), in bounded time and memory.

ARPA files (plain and gzip), lexicons, text files, torch checkpoints, output paths.
"""

from __future__ import annotations

import gzip
import resource
import time
from pathlib import Path

import pytest

from asrdecode.errors import FileFormatError
from asrdecode.lm import read_arpa
from asrdecode.lm.arpa import MAX_GZIP_RATIO, MAX_LINE_BYTES

GOOD = ["\\data\\", "ngram 1=4", "ngram 2=1", "", "\\1-grams:", "-1\t<s>\t-0.1", "-1\t</s>", "-1\td\t-0.2",
        "-1\t<unk>", "", "\\2-grams:", "-0.5\t<s> d", "", "\\end\\", ""]
GOOD_TEXT = "\n".join(GOOD).encode()


def _gz(tmp_path: Path, data: bytes, name: str = "lm.arpa.gz") -> Path:
    p = tmp_path / name
    p.write_bytes(gzip.compress(data))
    return p


def test_gzip_is_read_by_its_magic_bytes(tmp_path):
    assert read_arpa(_gz(tmp_path, GOOD_TEXT)).counts() == [4, 1]
    assert read_arpa(_gz(tmp_path, GOOD_TEXT, "compressed.arpa")).counts() == [4, 1]  # any name


@pytest.mark.parametrize("cut", [1, 8, 20])
def test_truncated_gzip_names_the_file(tmp_path, cut):
    data = gzip.compress(GOOD_TEXT * 1)
    p = tmp_path / "cut.arpa.gz"
    p.write_bytes(data[:-cut])
    with pytest.raises(FileFormatError, match=r"cut\.arpa\.gz:\d+: truncated or corrupt gzip data"):
        read_arpa(p)


def test_corrupt_gzip_names_the_file(tmp_path):
    data = bytearray(gzip.compress(GOOD_TEXT))
    data[len(data) // 2] ^= 0xFF
    p = tmp_path / "bad.arpa.gz"
    p.write_bytes(bytes(data))
    with pytest.raises(FileFormatError, match=r"bad\.arpa\.gz:\d+: truncated or corrupt gzip data"):
        read_arpa(p)


def test_text_file_named_gz_names_the_file(tmp_path):
    p = tmp_path / "plain.arpa.gz"
    p.write_bytes(GOOD_TEXT)
    with pytest.raises(FileFormatError, match=r"plain\.arpa\.gz: the file is named \.gz but is not gzip"):
        read_arpa(p)


def test_long_line_is_refused(tmp_path):
    p = tmp_path / "long.arpa"
    p.write_bytes(b"\\data\\\n" + b"x" * (MAX_LINE_BYTES + 10) + b"\n")
    with pytest.raises(FileFormatError, match=r"long\.arpa:2: line longer than"):
        read_arpa(p)


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_gzip_bomb_of_zeros_is_refused_in_bounded_memory(tmp_path):
    """64 MiB of zero bytes in one 'line' (the issue's bomb was 8.7 MB -> past 3.7 GB)."""
    p = tmp_path / "bomb.arpa.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        chunk = b"\0" * (1 << 20)
        for _ in range(64):
            f.write(chunk)
    before = _peak_mb()
    t0 = time.perf_counter()
    with pytest.raises(FileFormatError, match=r"bomb\.arpa\.gz:1: line longer than"):
        read_arpa(p)
    assert time.perf_counter() - t0 < 5
    assert _peak_mb() - before < 50  # a line is at most 1 MiB


def test_gzip_bomb_of_newlines_is_refused(tmp_path):
    """Blank lines are skipped, so a bomb of newlines is stopped by the expansion ratio."""
    p = tmp_path / "nl.arpa.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        f.write(b"\\data\\\n")
        chunk = b"\n" * (1 << 20)
        for _ in range(16):
            f.write(chunk)
    assert 16 * (1 << 20) > MAX_GZIP_RATIO * p.stat().st_size + MAX_LINE_BYTES  # the bomb is over the ratio
    with pytest.raises(FileFormatError, match=rf"nl\.arpa\.gz:\d+: decompresses to over {MAX_GZIP_RATIO} times"):
        read_arpa(p)


def test_dev_zero_is_refused():
    if not Path("/dev/zero").exists():
        pytest.skip("no /dev/zero")
    before = _peak_mb()
    with pytest.raises(FileFormatError, match=r"/dev/zero:1: line longer than"):
        read_arpa("/dev/zero")
    assert _peak_mb() - before < 50


def test_max_bytes(tmp_path):
    p = tmp_path / "lm.arpa"
    p.write_bytes(GOOD_TEXT)
    assert read_arpa(p, max_bytes=None).counts() == [4, 1]
    with pytest.raises(FileFormatError, match=r"lm\.arpa:\d+: holds over max_bytes=40 bytes"):
        read_arpa(p, max_bytes=40)
    with pytest.raises(ValueError, match="max_bytes must be"):
        read_arpa(p, max_bytes=0)


def test_non_utf8_arpa_word_names_the_line(tmp_path):
    p = tmp_path / "latin1.arpa"
    p.write_bytes(GOOD_TEXT.replace(b"-1\td\t-0.2", b"-1\t\xe9t\xe9\t-0.2").replace(b"<s> d", b"<s> \xe9t\xe9"))
    with pytest.raises(FileFormatError, match=r"latin1\.arpa:8: word is not valid UTF-8"):
        read_arpa(p)


def test_directory_is_a_named_error(tmp_path):
    with pytest.raises(FileFormatError, match="cannot open"):
        read_arpa(tmp_path)


# ------------------------------------------------------------------------------------ torch.load
SRC = Path(__file__).resolve().parents[2] / "src" / "asrdecode"


def test_every_torch_load_in_src_is_weights_only():
    """torch < 2.6 (allowed by pyproject) unpickles arbitrary code unless weights_only=True is explicit."""
    import re

    calls = []
    for f in SRC.rglob("*.py"):
        text = f.read_text(encoding="utf-8")
        for m in re.finditer(r"torch\.load\(([^()]*(?:\([^()]*\)[^()]*)*)\)", text):
            calls.append((f.name, m.group(1)))
    assert calls, "no torch.load found: the scan is broken"
    bad = [c for c in calls if "weights_only=True" not in c[1]]
    assert not bad, bad


class _Evil:
    def __reduce__(self):
        return (print, ("code ran while loading",))


def test_demo_checkpoint_with_code_is_refused(tmp_path):
    import torch

    from asrdecode.models.demo import read_encoder

    p = tmp_path / "encoder.pt"
    torch.save({"kind": "encoder", "frontend": "logmel", "state_dict": {}, "x": _Evil()}, str(p))
    with pytest.raises(FileFormatError, match=r"encoder\.pt: not a weights-only torch checkpoint"):
        read_encoder(p)
    p.write_bytes(b"not a checkpoint")
    with pytest.raises(FileFormatError, match=r"encoder\.pt: not a weights-only torch checkpoint"):
        read_encoder(p)


# --------------------------------------------------------------------------------- output paths
def test_check_output_path(tmp_path):
    from asrdecode.paths import OutputPathError, check_output_path

    check_output_path(None)
    check_output_path(tmp_path / "out.txt")
    with pytest.raises(OutputPathError, match=r"-o .*missing/out\.txt: the output folder .*missing does not exist"):
        check_output_path(tmp_path / "missing" / "out.txt", "-o")
    with pytest.raises(OutputPathError, match="is a folder"):
        check_output_path(tmp_path)
    assert issubclass(OutputPathError, ValueError)


@pytest.mark.parametrize("command", ["transcribe", "eval", "decode"])
def test_cli_output_into_missing_folder_fails_before_decoding(tmp_path, capsys, monkeypatch, command):
    import json

    import numpy as np

    from asrdecode import cli

    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the output path was checked")

    monkeypatch.setattr(cli, "_load_model", no_decoding)
    monkeypatch.setattr(cli, "make_pipeline", no_decoding)
    wav = Path(__file__).resolve().parents[2] / "data" / "real" / "cards-001.wav"
    out = tmp_path / "missing" / "out.txt"
    if command == "transcribe":
        argv = ["transcribe", str(wav), "--model", "demo-ctc", "-o", str(out)]
    elif command == "eval":
        m = tmp_path / "m.jsonl"
        m.write_text(json.dumps({"audio_filepath": str(wav), "duration": 1.0, "text": "x"}) + "\n")
        argv = ["eval", str(m), "--model", "demo-ctc", "-o", str(out)]
    else:
        em = tmp_path / "x.npy"
        np.save(em, np.log(np.full((3, 4), 0.25, dtype=np.float32)))
        argv = ["decode", str(em), "--blank-id", "0", "--model", "demo-ctc", "-o", str(out)]
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "the output folder" in captured.err and "does not exist" in captured.err
