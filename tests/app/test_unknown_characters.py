"""Phrases and lexicon words the tokenizer cannot spell are named errors (or skipped on request).

The bundled sentencepiece tokenizer has no digits, CJK or emoji: it maps them to ``<unk>``, and
runs of them to one ``<unk>``, so ``"word1"`` ... ``"word20000"`` all tokenised to
``▁wor d <unk>`` and 20,000 boosted phrases collapsed into one trie path.
"""

from __future__ import annotations

import pytest

pytest.importorskip("sentencepiece")

from asrdecode.errors import DecodingInputError  # noqa: E402
from asrdecode.lm import BoostingTree  # noqa: E402
from asrdecode.models import load  # noqa: E402
from asrdecode.tokenizers import CharTokenizer, spell  # noqa: E402


@pytest.fixture(scope="module")
def tok():
    return load("demo-ctc").tokenizer


def _letters(n: int) -> str:
    """A spellable, distinct name for ``n``: four base-26 letters (no name holds another)."""
    s = ""
    for _ in range(4):
        s = "abcdefghijklmnopqrstuvwxyz"[n % 26] + s
        n //= 26
    return s


def test_spell_reports_the_unknown_characters(tok):
    assert tok.unk_id is not None and tok.unk_id != tok.blank_id
    assert spell(tok, "hello world")[1] == []
    assert spell(tok, "word12")[1] == ["1", "2"]
    assert spell(tok, "東京 tower")[1] == ["東", "京"]
    assert spell(tok, "hi 😀")[1] == ["😀"]
    char = CharTokenizer(list("_ab "), blank_id=0)
    assert spell(char, "abz a")[1] == ["z"]


@pytest.mark.parametrize("phrase, chars", [("word1", "'1'"), ("東京", "'東', '京'"), ("go 😀", "'😀'")])
def test_boosting_phrase_with_unknown_characters_is_an_error(tok, phrase, chars):
    with pytest.raises(DecodingInputError, match=rf"phrases\[1\] = '{phrase}' holds characters the tokenizer "
                                                 rf"cannot spell \({chars}\)"):
        BoostingTree.from_phrases(["hello", phrase], tok)


def test_boosting_skip_unknown(tok):
    tree = BoostingTree.from_phrases(["hello", "word1", "東京", "world"], tok, on_unknown="skip")
    assert tree.skipped == ["word1", "東京"]
    assert [ids for ids, _ in tree.phrases[0]] == [tok.encode("hello"), tok.encode("world")]
    with pytest.raises(DecodingInputError, match="no phrase left: all 2 phrases"):
        BoostingTree.from_phrases(["word1", "word2"], tok, on_unknown="skip")


def test_twenty_thousand_phrases_no_longer_collapse(tok):
    digits = [f"word{i}" for i in range(20_000)]
    with pytest.raises(DecodingInputError, match=r"phrases\[0\] = 'word0'"):
        BoostingTree.from_phrases(digits, tok)
    names = [f"word {_letters(i)}" for i in range(20_000)]
    assert len({tuple(tok.encode(n)) for n in names}) == 20_000  # distinct spellings
    tree = BoostingTree.from_phrases(names, tok, weight=1.0)
    assert len(tree.phrases[0]) == 20_000 and tree.num_states > 20_000
    for n in (names[0], names[777], names[19_999]):
        ids = tok.encode(n)
        assert tree.score_sequence(ids) == pytest.approx(len(ids), abs=1e-4)  # each phrase earns its own bonus


def test_lexicon_from_tokenizer_unknown_words(tok):
    from asrdecode.ctc.wfst import lexicon_from_tokenizer

    with pytest.raises(DecodingInputError, match=r"word 'route66' holds characters the tokenizer cannot spell \('6'\)"):
        lexicon_from_tokenizer(["hello", "route66"], tok)
    lex = lexicon_from_tokenizer(["<s>", "hello", "route66", "</s>", "<unk>"], tok, on_unknown="skip")
    assert lex == {"hello": tok.encode("hello")}
    with pytest.raises(DecodingInputError, match="on_unknown must be one of"):
        lexicon_from_tokenizer(["hello"], tok, on_unknown="drop")


ARPA = """\\data\\
ngram 1=5

\\1-grams:
-1.0\t<s>
-1.0\t</s>
-0.5\thello
-0.7\troute66
-1.2\tcards

\\end\\
"""


def test_build_graph_unknown_words(tmp_path, capsys):
    pytest.importorskip("kaldifst")
    from asrdecode.cli import main

    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA)
    out = tmp_path / "tlg.pt"
    assert main(["build-graph", "--lm", str(lm), "--out", str(out)]) == 2
    assert "word 'route66' holds characters the tokenizer cannot spell" in capsys.readouterr().err
    assert not out.exists()
    assert main(["build-graph", "--lm", str(lm), "--out", str(out), "--skip-unknown-words"]) == 0
    assert "2 words" in capsys.readouterr().out


def test_non_utf8_lexicon_is_a_named_error(tmp_path, capsys):
    pytest.importorskip("kaldifst")
    from asrdecode.cli import main
    from asrdecode.ctc.wfst import read_lexicon
    from asrdecode.errors import FileFormatError

    lex = tmp_path / "latin1.txt"
    lex.write_bytes("hello \u2581he llo\n".encode() + b"caf\xe9 " + "\u2581c a f\n".encode())
    with pytest.raises(FileFormatError, match=r"latin1\.txt:2: not UTF-8 text"):
        read_lexicon(lex, ["\u2581he", "llo", "\u2581c", "a", "f"])
    lm = tmp_path / "words.arpa"
    lm.write_text(ARPA.replace("route66", "world"))
    lex.write_bytes(b"caf\xe9 " + "\u2581c a f\n".encode())
    assert main(["build-graph", "--lm", str(lm), "--lexicon", str(lex), "--out", str(tmp_path / "g.pt")]) == 2
    assert "latin1.txt:1: not UTF-8 text" in capsys.readouterr().err
