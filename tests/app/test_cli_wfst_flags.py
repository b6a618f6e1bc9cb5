"""The CLI's WFST search flags: --wfst-beam / --max-active reach the decoder; --beam with --decoder wfst is refused."""

from __future__ import annotations

import pytest

pytest.importorskip("kaldifst")
pytest.importorskip("sentencepiece")

from asrdecode import cli  # noqa: E402
from asrdecode.cli import main  # noqa: E402

ARPA = "\\data\\\nngram 1=4\n\n\\1-grams:\n-1.0\t<s>\n-1.0\t</s>\n-0.5\thello\n-0.7\tworld\n\n\\end\\\n"


def test_wfst_flags(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    graph = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(graph)]) == 0
    err = capsys.readouterr().err  # progress: each stage with its time and the peak memory
    for stage in ("building the compact TLG of 2 words", "LG composed", "TLG composed", "graph arrays"):
        assert stage in err
    assert err.count("peak memory") == 4
    clip = str(sorted(Path("data/real").glob("*.wav"))[0])
    seen = []
    real = cli.decode_options

    def spy(args, bundle=None):
        opts = real(args, bundle)
        seen.append(opts)
        return opts

    monkeypatch.setattr(cli, "decode_options", spy)
    base = ["transcribe", clip, "--model", "demo-ctc", "--decoder", "wfst", "--graph", str(graph)]
    assert main(base + ["--wfst-beam", "7.5", "--max-active", "123", "--min-active", "20"]) == 0
    assert (seen[-1].wfst_beam, seen[-1].max_active, seen[-1].min_active) == (7.5, 123, 20)
    capsys.readouterr()
    assert main(base + ["--beam", "8"]) == 2
    assert "--wfst-beam" in capsys.readouterr().err
    assert main(base + ["--max-active", "0"]) == 2
    assert "--max-active" in capsys.readouterr().err
    assert main(base + ["--min-active", "-1"]) == 2
    assert "--min-active" in capsys.readouterr().err
    assert main(base + ["--wfst-beam", "-1"]) == 2
    assert "--wfst-beam must be a finite number > 0" in capsys.readouterr().err
