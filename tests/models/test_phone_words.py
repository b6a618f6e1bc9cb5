"""Words from phone-ctc's CTC prefix beam search: the lexicon-mode word LM over pronunciations.

Tiny LMs and lexicons (seconds); the real-clip WER check over the bundled 52k-word LM is slow.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from asrdecode import ctc, evaluate
from asrdecode.errors import DecodingInputError
from asrdecode.lm import read_arpa
from asrdecode.models.phone_words import BOUNDARIES, PhoneWordTokenizer, _build, _table
from test_phone_bundle import TINY_ARPA, TINY_LEX, needs_hama

REPO = Path(__file__).resolve().parents[2]
SYMBOLS = ["<blank>", "<wb>", " ", "t", "ɛ", "n", "ʌ", "v", "k", "l", "b", "z", "h", "ɑ", "ɹ", "s", "ə", "<pad>"]
BLANK = 0
# "sevan" spelled like "seven" (a homophone: the more likely word keeps the pronunciation)
LEX = TINY_LEX + "sevan s ɛ v ə n\n"


@pytest.fixture
def tiny(tmp_path):
    arpa, lex = tmp_path / "tiny.arpa", tmp_path / "tiny.lex"
    arpa.write_text(TINY_ARPA.replace("ngram 1=7", "ngram 1=8").replace("-1.2\tseven\t-0.3\n",
                                                                         "-1.2\tseven\t-0.3\n-1.5\tsevan\t-0.3\n"))
    lex.write_text(LEX)
    return arpa, lex


def _lexicon(path) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in Path(path).read_text().splitlines() if line.strip()}


def _peaky(phones: list[str]) -> torch.Tensor:
    x = torch.full((1, 2 * len(phones) + 1, len(SYMBOLS)), -9.0)
    x[0, :, BLANK] = -0.01
    for k, p in enumerate(phones):
        x[0, 2 * k + 1, SYMBOLS.index(p)] = 0.0
        x[0, 2 * k + 1, BLANK] = -9.0
    return x.log_softmax(-1)


def test_tokenizer_words_times_and_errors():
    tok = PhoneWordTokenizer(SYMBOLS, BLANK, {(3, 4, 5): "ten", (6, 7): "of"})
    ids = [3, 4, 5, 1, 6, 7, 2, 8, 9]
    assert tok.decode(ids) == "ten of kl"  # a pronunciation it does not know: its phones
    assert tok.word_times(ids, list(range(10, 19))) == [("ten", 10, 12), ("of", 14, 15), ("kl", 17, 18)]
    assert tok.decode([]) == "" and tok.decode([1, 2]) == ""
    assert tok.id_to_piece(1) == "\u2581" and tok.id_to_piece(3) == "t" and tok.vocab_size == len(SYMBOLS)
    with pytest.raises(DecodingInputError, match="token id 0"):
        tok.decode([0])
    with pytest.raises(DecodingInputError, match="token id 99"):
        tok.decode([3, 99])


def test_lexicon_mode_beam_search_gives_lexicon_words(tiny):
    arpa, lex = tiny
    table = _table(read_arpa(arpa), _lexicon(lex), SYMBOLS, None)
    seven = tuple(SYMBOLS.index(p) for p in "s ɛ v ə n".split())
    assert table[seven] == "seven" and "sevan" not in table.values()  # the likelier homophone
    lm = _build(read_arpa(arpa), table, SYMBOLS, BLANK)
    assert lm.lexicon and sorted(lm.words) == sorted("".join(chr(0xE000 + t) for t in p) for p in table)
    tok = PhoneWordTokenizer(SYMBOLS, BLANK, table)
    x = _peaky(["t", "ɛ", "n", "<wb>", "ʌ", "v", " ", "k", "l", "ʌ", "b", "z"])  # both boundary classes
    hyp = ctc.beam_search(x, None, BLANK, beam=8, fusion=[lm.weighted(0.8, word_bonus=2.0)])[0][0]
    assert tok.decode(hyp.tokens) == "ten of clubs" and math.isfinite(hyp.score)
    assert [w for w, _, _ in tok.word_times(hyp.tokens, hyp.timestamps)] == ["ten", "of", "clubs"]
    # a phone the lexicon cannot spell ("h" of "hearts" without the rest) is never emitted
    y = _peaky(["t", "ɛ", "n", "<wb>", "h", "<wb>"])
    out = ctc.beam_search(y, None, BLANK, beam=8, fusion=[lm.weighted(0.8)])[0][0]
    assert all(w in table.values() for w in tok.decode(out.tokens).split())


@needs_hama
def test_bundle_beam_defaults_decode_a_real_clip_to_words(tiny, monkeypatch, tmp_path):
    from asrdecode.audio import read_audio
    from asrdecode.models.phone import PhoneCTCBundle

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, lex = tiny
    bundle = PhoneCTCBundle(words=4, lm=arpa, lexicon=lex)
    msgs: list[str] = []
    lm, tok = bundle.word_lm(log=msgs.append)
    assert any("building the phone-ctc word LM" in m for m in msgs)
    kw = bundle.beam_defaults
    assert kw["tokenizer"] is tok and kw["fusion"][0][0].lexicon
    feats, lens = bundle.features([read_audio(REPO / "data" / "real" / "cards-001.wav")])
    lp = bundle.model.log_probs_from_encoder(bundle.encode_features(feats, lens)[0])
    hyp = ctc.beam_search(lp, lens, bundle.blank_id, **kw)[0][0]
    assert hyp.text == "ten of clubs"
    again = PhoneCTCBundle(words=4, lm=arpa, lexicon=lex)
    msgs.clear()
    again.word_lm(log=msgs.append)
    assert msgs == []  # cached


@needs_hama
@pytest.mark.slow
def test_beam_search_wer_on_the_real_clips():
    """The bundled 52k-word LM over hama's phones: WER on data/real at most 25 % (issue 29)."""
    from asrdecode.audio import read_audio
    from asrdecode.models.phone import PhoneCTCBundle

    bundle = PhoneCTCBundle(words=1)
    rows = [json.loads(line) for line in (REPO / "data" / "real" / "manifest.jsonl").read_text().splitlines()]
    feats, lens = bundle.features([read_audio(REPO / "data" / "real" / r["audio_filepath"]) for r in rows])
    lp = bundle.model.log_probs_from_encoder(bundle.encode_features(feats, lens)[0])
    res = ctc.beam_search(lp, lens, bundle.blank_id, **bundle.beam_defaults)
    wer = evaluate.wer([r["text"] for r in rows], [r[0].text for r in res])
    assert wer <= 0.25, wer
    assert set(BOUNDARIES) <= set(bundle.symbols)


@needs_hama
def test_registry_beam_decoder_gives_phone_ctc_words(tiny, monkeypatch, tmp_path):
    """`--decoder beam` on phone-ctc (the registry's CTC beam builder): words and word times from the
    bundle's lexicon word LM, its tuned beam; with the user's own LM, the plain search over phones."""
    from asrdecode.audio import read_audio
    from asrdecode.models.phone import PhoneCTCBundle
    from asrdecode.pipeline import make_pipeline, resolve_options

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, lex = tiny
    bundle = PhoneCTCBundle(words=4, lm=arpa, lexicon=lex)
    opts = resolve_options(bundle, {"decoder": "beam"})
    assert opts.beam == 16 and opts.graph is None  # the tuned beam applies, the WFST graph does not
    encode, decode = make_pipeline(bundle, opts)
    hyp = decode(*encode([read_audio(REPO / "data" / "real" / "cards-001.wav")]))[0]
    assert hyp.text == "ten of clubs"
    assert [w for w, _, _ in hyp.words] == ["ten", "of", "clubs"]
    frames = set(hyp.timestamps)
    assert all(s in frames and e in frames and s <= e for _, s, e in hyp.words)  # each word on its tokens
    own = resolve_options(bundle, {"decoder": "beam", "lm": "src/asrdecode/models/assets/token-4gram.arpa.gz"})
    from asrdecode.decoders import bundle_word_search

    assert bundle_word_search(bundle, own) is None  # the user's LM replaces the bundle's word search


@needs_hama
def test_greedy_on_phone_ctc_is_refused_naming_the_word_decoders(tiny, monkeypatch, tmp_path):
    from asrdecode.errors import DecodingInputError
    from asrdecode.models.phone import PhoneCTCBundle
    from asrdecode.pipeline import make_pipeline, resolve_options, stream_options

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, lex = tiny
    bundle = PhoneCTCBundle(words=4, lm=arpa, lexicon=lex)
    opts = resolve_options(bundle, {"decoder": "greedy"})
    for door in (make_pipeline, stream_options):  # offline commands and the server alike
        with pytest.raises(DecodingInputError, match=r"--decoder greedy gives phone-ctc's phones, not words; "
                                                     r"the decoders that give words: wfst, beam"):
            door(bundle, opts)


@needs_hama
@pytest.mark.parametrize("own", [{"word_lm": "W"}, {"lm": "T"}, {"word_lm": "W", "lm": "T"}])
def test_beam_with_a_users_lm_on_phone_ctc_is_refused(tiny, monkeypatch, tmp_path, own):
    """A user's --word-lm / --lm replaces the bundle's lexicon word LM, and the beam search would give
    phones (98.9 % WER as words): refused by name, as greedy is."""
    from asrdecode.errors import DecodingInputError
    from asrdecode.models.phone import PhoneCTCBundle
    from asrdecode.pipeline import make_pipeline, resolve_options, stream_options

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, lex = tiny
    bundle = PhoneCTCBundle(words=4, lm=arpa, lexicon=lex)
    opts = resolve_options(bundle, {"decoder": "beam", **{k: str(arpa) for k in own}})
    flags = " ".join(f for f, k in (("--lm", "lm"), ("--word-lm", "word_lm")) if k in own)
    for door in (make_pipeline, stream_options):
        with pytest.raises(DecodingInputError, match=f"--decoder beam {flags} gives phone-ctc's phones, not words"):
            door(bundle, opts)


@needs_hama
def test_cli_beam_word_lm_on_the_default_model_is_refused(tiny, monkeypatch, tmp_path, capsys):
    from asrdecode import cli

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    arpa, _ = tiny
    clip = REPO / "data" / "real" / "cards-001.wav"
    code = cli.main(["transcribe", str(clip), "--decoder", "beam", "--word-lm", str(arpa)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "--decoder beam --word-lm gives phone-ctc's phones, not words" in err
