"""phone-ctc: hama's phone CTC model as a bundle, its shipped lexicon and the cached TLG graph.

Graphs here are built for tiny LMs (a few words), so the cache tests cost seconds; the default
vocabulary is set small for the whole test session in ``conftest.py`` (``ASRDECODE_PHONE_WORDS``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import asrdecode.models as models
from asrdecode.models.phone_lexicon import HamaMissingError, require_hama

REPO = Path(__file__).resolve().parents[2]
CLIP = REPO / "data" / "real" / "cards-001.wav"  # "ten of clubs"

TINY_ARPA = """\\data\\
ngram 1=7
ngram 2=3

\\1-grams:
-1.0\t<s>\t-0.3
-1.0\t</s>
-0.8\tten\t-0.3
-0.9\tof\t-0.3
-1.0\tclubs\t-0.3
-1.1\thearts\t-0.3
-1.2\tseven\t-0.3

\\2-grams:
-0.2\tten of
-0.2\tof clubs
-0.3\tof hearts

\\end\\
"""
TINY_LEX = "ten t ɛ n\nof ʌ v\nclubs k l ʌ b z\nhearts h ɑ ɹ t s\nseven s ɛ v ə n\n"


def _has_hama() -> bool:
    try:
        require_hama()
    except HamaMissingError:
        return False
    return True


needs_hama = pytest.mark.skipif(not _has_hama(), reason="hama (the phone-ctc model) is not installed")


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A tiny LM + lexicon and an empty cache folder."""
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, lex = tmp_path / "tiny.arpa", tmp_path / "tiny.lex"
    arpa.write_text(TINY_ARPA, encoding="utf-8")
    lex.write_text(TINY_LEX, encoding="utf-8")
    return arpa, lex


def _entries(tmp_path: Path) -> list[str]:
    folder = tmp_path / "cache" / "graphs"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_missing_hama_names_the_extra(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "hama", None)  # import hama -> ImportError
    with pytest.raises(HamaMissingError, match=r"pip install -e '\.\[hama\]' in the asrdecode checkout"):
        require_hama()
    with pytest.raises(HamaMissingError, match=r"-e '\.\[hama\]'"):
        models.load_bundle("phone-ctc")
    assert issubclass(HamaMissingError, ImportError)


def test_default_model_follows_hama(monkeypatch, capsys) -> None:
    monkeypatch.setattr(models, "find_spec", lambda name: None)
    monkeypatch.setattr(models, "_fallback_noted", False)
    assert models.default_model() == "demo-rnnt"
    assert models.default_model() == "demo-rnnt"
    notice = capsys.readouterr().err.splitlines()
    assert len(notice) == 1 and "hama is not installed" in notice[0] and "demo-rnnt" in notice[0]  # once
    monkeypatch.setattr(models, "find_spec", lambda name: object())
    assert models.default_model() == "phone-ctc"
    assert capsys.readouterr().err == ""


def test_phone_spec_words(monkeypatch) -> None:
    from asrdecode.errors import DecodingInputError
    from asrdecode.models.phone import DEFAULT_WORDS, parse_phone_spec

    monkeypatch.delenv("ASRDECODE_PHONE_WORDS", raising=False)
    assert parse_phone_spec("phone-ctc") == DEFAULT_WORDS
    assert parse_phone_spec("phone-ctc:words=700") == 700
    assert parse_phone_spec("phone-ctc:words=all") is None
    assert parse_phone_spec("demo-ctc") is False
    monkeypatch.setenv("ASRDECODE_PHONE_WORDS", "all")
    assert parse_phone_spec("phone-ctc") is None
    for bad in ("phone-ctc:words=0", "phone-ctc:words=x", "phone-ctc:words=-3"):
        with pytest.raises(DecodingInputError, match="words must be a positive integer"):
            parse_phone_spec(bad)


@needs_hama
def test_bundle_loads_and_encodes() -> None:
    from asrdecode.audio import read_audio
    from asrdecode.streaming.frontend import BlockFrontEnd

    b = models.check_bundle(models.load_bundle("phone-ctc"), "phone-ctc")
    assert b.kind == "ctc" and b.model.vocab_size == 191 == b.tokenizer.vocab_size
    assert b.symbols[b.blank_id] == "<blank>" and b.frame_seconds == pytest.approx(0.02)
    wave = read_audio(str(CLIP))
    feats, flen = b.features([wave, wave[:8000]])
    assert feats.shape[0] == 2 and feats.shape[2] == 191 and int(flen[0]) == feats.shape[1]
    assert abs(int(flen[0]) - wave.numel() / 320) <= 2 and int(flen[1]) < int(flen[0])
    enc, elen = b.encode_features(feats, flen)
    lp = b.model.log_probs_from_encoder(enc)
    assert torch.allclose(lp[0, : flen[0]].exp().sum(-1), torch.ones(int(flen[0])), atol=1e-3)
    frames = BlockFrontEnd(b, head=b.model.log_probs_from_encoder).encode_utterance(wave)
    assert frames.shape[1] == 191 and abs(frames.shape[0] - int(flen[0])) <= 2
    with pytest.raises(ValueError, match=r"feats must be a float tensor \[B, T, 191\]"):
        b.encode_features(feats[..., :10], flen)
    with pytest.raises(ValueError, match="lengths must be in"):
        b.encode_features(feats, flen + 1000)


@needs_hama
def test_tokenizer_words_and_pieces() -> None:
    b = models.load_bundle("phone-ctc")
    tok = b.tokenizer
    ids = tok.encode("ten of")
    assert b.wb_id in ids and tok.id_to_piece(b.wb_id) == "\u2581"
    assert tok.decode(ids).split() == ["".join(b.phone_lexicon()["ten"]), "".join(b.phone_lexicon()["of"])]
    with pytest.raises(ValueError, match="not a non-blank symbol"):
        tok.decode([b.blank_id])
    with pytest.raises(ValueError, match="not in the phone lexicon"):
        tok.encode("qqqzzx")


@needs_hama
def test_shipped_lexicon_covers_the_word_lm() -> None:
    from asrdecode.models.phone_lexicon import SHIPPED_LEXICON, hama_phone_symbols, read_phone_lexicon

    lex = read_phone_lexicon(SHIPPED_LEXICON, hama_phone_symbols())  # every phone is a recogniser symbol
    assert len(lex) > 50000
    for w in ("ten", "of", "clubs", "sense", "sensibility"):
        assert w in lex and lex[w]


@needs_hama
def test_fast_g2p_equals_hama() -> None:
    """The padding-free, memoised G2P gives exactly hama's output."""
    import hama

    from asrdecode.models.phone_lexicon import _fast_g2p

    slow, fast = hama.G2PModel(), _fast_g2p()
    for w in ("ten", "clubs", "typewriter", "sensibility", "dashwood", "a", "revolution"):
        assert [a.phoneme for a in fast.predict(w).alignments] == [a.phoneme for a in slow.predict(w).alignments]


@needs_hama
def test_graph_cache_keyed_atomic_and_checked(tiny, tmp_path, capsys) -> None:
    from asrdecode.ctc.wfst import load_graph
    from asrdecode.models import phone

    arpa, lex = tiny
    first = phone.phone_graph(4, lm=arpa, lexicon=lex)
    assert first.built and "building the phone-ctc decoding graph (4 words)" in capsys.readouterr().err
    g = load_graph(first.path)
    assert sorted(g.words[1:]) == ["clubs", "hearts", "of", "ten"]  # "seven": least likely, pruned
    again = phone.phone_graph(4, lm=arpa, lexicon=lex)
    assert not again.built and again.path == first.path and capsys.readouterr().err == ""
    # another vocabulary size is another entry
    other = phone.phone_graph(5, lm=arpa, lexicon=lex)
    assert other.built and other.path != first.path and "seven" in load_graph(other.path).words
    # another lexicon (same words, other bytes) too
    lex.write_text(TINY_LEX.replace("ʌ v", "ə v"), encoding="utf-8")
    assert phone.phone_graph(4, lm=arpa, lexicon=lex).path != first.path
    lex.write_text(TINY_LEX, encoding="utf-8")
    # a corrupt graph file is rebuilt with a message, never used
    data = bytearray(first.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    first.path.write_bytes(bytes(data))
    capsys.readouterr()
    fixed = phone.phone_graph(4, lm=arpa, lexicon=lex)
    err = capsys.readouterr().err
    assert fixed.built and "not usable" in err and "corrupt" in err and "rebuilding" in err
    assert load_graph(fixed.path).words == g.words
    # truncated file, unreadable record, stale record
    fixed.path.write_bytes(fixed.path.read_bytes()[:100])
    assert phone.phone_graph(4, lm=arpa, lexicon=lex).built and "truncated" in capsys.readouterr().err
    record = fixed.path.with_suffix(".json")
    record.write_text("{not json", encoding="utf-8")
    assert phone.phone_graph(4, lm=arpa, lexicon=lex).built and "unreadable" in capsys.readouterr().err
    info = json.loads(record.read_text(encoding="utf-8"))
    record.write_text(json.dumps({**info, "key": "0" * 20}), encoding="utf-8")
    assert phone.phone_graph(4, lm=arpa, lexicon=lex).built and "stale" in capsys.readouterr().err


@needs_hama
def test_graph_build_crash_leaves_no_entry(tiny, tmp_path, monkeypatch) -> None:
    from asrdecode.models import phone

    arpa, lex = tiny

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # e.g. Ctrl-C mid-build

    class Half:
        def save(self, path):
            Path(path).write_bytes(b"half a graph")
            raise OSError("disk full")

    monkeypatch.setattr(phone, "build_phone_graph", crash)
    with pytest.raises(KeyboardInterrupt):
        phone.phone_graph(4, lm=arpa, lexicon=lex)
    assert _entries(tmp_path) == []
    monkeypatch.setattr(phone, "build_phone_graph", lambda *a, **k: Half())
    with pytest.raises(OSError, match="disk full"):
        phone.phone_graph(4, lm=arpa, lexicon=lex)
    assert _entries(tmp_path) == []  # the half-written temp file is gone, nothing is named as the graph
    monkeypatch.undo()
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    assert phone.phone_graph(4, lm=arpa, lexicon=lex).built


@needs_hama
def test_cli_default_model_transcribes_a_real_clip(tmp_path, monkeypatch, capsys) -> None:
    """No --model, no decoding flags: phone-ctc, WFST with its cached graph, words out."""
    from asrdecode import cli

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ASRDECODE_PHONE_WORDS", "300")  # a small graph: seconds to build
    assert cli.main(["transcribe", str(CLIP), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert rec["text"].strip() and all(w["word"] == w["word"].lower() for w in rec["words"])
    assert "building the phone-ctc decoding graph (300 words)" in err
    assert "one" not in rec["text"].split()
    assert cli.main(["transcribe", str(CLIP), "--boost", "one:30"]) == 0  # word boosting through the graph
    assert "one" in capsys.readouterr().out.split()
