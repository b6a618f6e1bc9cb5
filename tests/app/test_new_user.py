"""What a new user met (issue 37, item 5): a folder given to ``transcribe``, a graph built for another
model, a ``--boost`` phrase the model cannot spell, the package's license metadata."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("kaldifst")
pytest.importorskip("sentencepiece")

from asrdecode.cli import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "data" / "real"
ARPA = """\\data\\
ngram 1=5

\\1-grams:
-1.0\t<s>
-1.0\t</s>
-0.5\tcards
-0.7\thearts
-1.2\tspades

\\end\\
"""


def test_transcribe_a_folder_decodes_its_audio_files(capsys, tmp_path) -> None:
    assert main(["transcribe", str(REAL), "--model", "demo-ctc"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [Path(line.split("\t")[0]).name for line in lines] == sorted(p.name for p in REAL.glob("*.wav"))
    (tmp_path / "manifest.jsonl").write_text('{"audio_filepath": "x.wav", "text": "x"}\n')
    assert main(["transcribe", str(tmp_path), "--model", "demo-ctc"]) == 2
    err = capsys.readouterr().err
    assert "a folder without audio files" in err and "asrdecode eval" in err and "manifest.jsonl" in err


def test_a_graph_for_another_model_names_the_model_it_was_built_for(capsys, tmp_path) -> None:
    pytest.importorskip("hama")
    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    graph = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(graph)]) == 0
    assert "for --model demo-ctc" in capsys.readouterr().out
    clip = str(REAL / "cards-001.wav")
    assert main(["transcribe", clip, "--model", "phone-ctc", "--decoder", "wfst", "--graph", str(graph)]) == 2
    err = capsys.readouterr().err
    assert "built for a model of 257 tokens with blank id 256" in err and "pass --model demo-ctc" in err
    assert "build-graph --model phone-ctc" in err
    assert main(["transcribe", clip, "--model", "demo-ctc", "--decoder", "wfst", "--graph", str(graph)]) == 0


def test_boost_that_cannot_be_spelled_names_the_flag(capsys) -> None:
    clip = str(REAL / "cards-001.wav")
    assert main(["transcribe", clip, "--model", "demo-ctc", "--decoder", "beam", "--boost", "東京:2"]) == 2
    err = capsys.readouterr().err
    assert "--boost '東京:2'" in err and "leave this --boost out" in err and "on_unknown" not in err


def test_license_is_an_spdx_expression() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("tomllib is Python 3.11+")
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["license"] == "Apache-2.0"  # a table makes setuptools >= 77 warn on every build
    assert "setuptools>=77" in meta["build-system"]["requires"]  # the first setuptools that reads SPDX strings
