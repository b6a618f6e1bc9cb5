"""`asrdecode build-graph`: a TLG graph from a word ARPA LM, loadable and decodable; bad inputs exit 2."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kaldifst")
pytest.importorskip("sentencepiece")

from asrdecode.cli import main  # noqa: E402
from asrdecode.ctc.wfst import WFSTDecoder, load_graph  # noqa: E402
from asrdecode.models import load  # noqa: E402

ARPA = """\\data\\
ngram 1=5
ngram 2=2

\\1-grams:
-1.0\t<s>\t-0.3
-1.0\t</s>
-0.5\thello\t-0.2
-0.7\tworld\t-0.2
-1.2\tcards

\\2-grams:
-0.2\t<s> hello
-0.1\thello world

\\end\\
"""


def test_build_graph_from_tokenizer_spellings(tmp_path, capsys):
    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    out = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(out), "--topology", "normal"]) == 0
    cap = capsys.readouterr()
    assert "3 words" in cap.out
    assert "asrdecode: building the normal TLG of 3 words" in cap.err and "build-graph:" in cap.err  # the stages
    assert main(["build-graph", "--lm", str(lm), "--out", str(out), "--topology", "normal", "--quiet"]) == 0
    cap = capsys.readouterr()
    assert "3 words" in cap.out and cap.err == ""
    graph = load_graph(out)
    demo = load("demo-ctc")
    # Peaky emissions spelling "hello world" decode to exactly those words through the graph.
    ids = demo.tokenizer.encode("hello world")
    T, V = 2 * len(ids) + 1, demo.tokenizer.vocab_size
    logits = torch.full((1, T, V), -8.0)
    logits[0, :, demo.blank_id] = 0.0
    for i, t in enumerate(ids):
        logits[0, 2 * i + 1, t] = 6.0
    hyp = WFSTDecoder(graph, blank_id=demo.blank_id)(torch.log_softmax(logits, -1), torch.tensor([T]))[0]
    assert [w for w, _, _ in hyp.words] == ["hello", "world"]


def test_build_graph_with_lexicon_file(tmp_path):
    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    tok = load("demo-ctc").tokenizer
    lex = tmp_path / "lexicon.txt"
    lex.write_text("".join(f"{w} {' '.join(tok.id_to_piece(i) for i in tok.encode(w))}\n" for w in ("hello", "world", "cards")))
    out = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--lexicon", str(lex), "--out", str(out)]) == 0
    assert out.is_file()


def test_build_graph_bad_inputs(tmp_path, capsys):
    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    out = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(tmp_path / "missing.arpa"), "--out", str(out)]) == 2
    assert "missing.arpa: --lm file not found" in capsys.readouterr().err
    lex = tmp_path / "lexicon.txt"
    lex.write_text("hello \u2581he llo\nworld\n")
    assert main(["build-graph", "--lm", str(lm), "--lexicon", str(lex), "--out", str(out)]) == 2
    assert "lexicon.txt:" in capsys.readouterr().err
    bad_lm = tmp_path / "bad.arpa"
    bad_lm.write_text(ARPA.replace("ngram 2=2", "ngram 2=3"))
    assert main(["build-graph", "--lm", str(bad_lm), "--out", str(out)]) == 2
    assert "bad.arpa" in capsys.readouterr().err
    assert not out.exists()
    assert main(["build-graph", "--lm", str(lm), "--out", str(tmp_path / "nope" / "g.pt")]) == 2


def test_transcribe_with_wfst_decoder(tmp_path, capsys):
    """`transcribe --decoder wfst` reads words of the graph's vocabulary only, with word times."""
    import json
    from pathlib import Path

    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    graph = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(graph)]) == 0
    capsys.readouterr()
    clip = sorted(Path("data/real").glob("*.wav"))[0]
    assert main(["transcribe", str(clip), "--model", "demo-ctc", "--decoder", "wfst", "--graph", str(graph),
                 "--boost", "cards:3", "--format", "json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    words = rec["text"].split()
    assert words and set(words) <= {"hello", "world", "cards"}
    assert [w["word"] for w in rec["words"]] == words
    assert all(w["start"] < w["end"] for w in rec["words"])
    # bad combinations exit 2 with a message
    assert main(["transcribe", str(clip), "--model", "demo-ctc", "--decoder", "wfst"]) == 2
    assert "--graph" in capsys.readouterr().err
    assert main(["transcribe", str(clip), "--model", "demo-rnnt", "--decoder", "wfst", "--graph", str(graph)]) == 2
    assert "demo-ctc" in capsys.readouterr().err
    assert main(["transcribe", str(clip), "--model", "demo-ctc", "--decoder", "wfst", "--graph", str(graph),
                 "--boost", "zebra:2"]) == 2
    assert "zebra" in capsys.readouterr().err


def test_stream_options_carry_the_wfst_search_settings(tmp_path):
    # the streaming path (long audio) decodes with the same WFST beam and max_active as the whole-file path
    from asrdecode.models import load_bundle
    from asrdecode.pipeline import DecodeOptions, stream_options

    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    graph = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(graph)]) == 0
    opts = DecodeOptions(decoder="wfst", graph=str(graph), wfst_beam=9.0, max_active=77, acoustic_scale=1.5,
                         boost=("cards:3",))
    kw, boosts = stream_options(load_bundle("demo-ctc"), opts)
    assert (kw["decoder"], kw["beam"], kw["max_active"], kw["acoustic_scale"]) == ("wfst", 9.0, 77, 1.5)
    assert boosts == {"cards": 3.0}
