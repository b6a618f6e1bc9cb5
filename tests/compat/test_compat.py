"""asrdecode.compat: pyctcdecode- and torchaudio-style scripts run against the facades, changing only
the import, give the same transcripts (and scores) as asrdecode's own calls; argument translation,
return shapes, word frames and every bad-input path. Peer runs (real pyctcdecode, flashlight-text)
are slow-marked."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asrdecode import ctc
from asrdecode.compat import build_ctcdecoder, ctc_decoder
from asrdecode.compat.pyctcdecode import normalize_labels
from asrdecode.errors import DecodingInputError, FileFormatError
from asrdecode.lm import BoostingTree, NGramLM, TokenMap, WordNGramLM
from test_lm_word import random_word_arpa

LN10 = math.log(10.0)
WORDS = ["cab", "abc", "bad", "dab", "ace", "cad", "bead"]
LABELS = ["", " ", "a", "b", "c", "d", "e"]  # pyctcdecode style: "" blank, " " delimiter
TOKENS = ["-", "|", "a", "b", "c", "d", "e"]  # torchaudio style: "-" blank, "|" silence

PYCTC_SCRIPT = """
{import_line}
decoder = build_ctcdecoder(labels, kenlm_model_path=arpa_path, alpha=0.6, beta=1.2)
texts = [decoder.decode(x, beam_width=12) for x in logits_list]
batch_texts = decoder.decode_batch(None, logits_list, beam_width=12)
beams = decoder.decode_beams(logits_list[0], beam_width=12)
best_text, _, word_frames, logit_score, combined_score = beams[0]
hot_texts = [decoder.decode(x, beam_width=12, hotwords=["bead"], hotword_weight=4.0) for x in logits_list]
"""

TORCHAUDIO_SCRIPT = """
import torch
{import_line}
decoder = ctc_decoder(lexicon=lexicon_path, tokens=tokens_path, lm=arpa_path, nbest=3, beam_size=12,
                      beam_threshold=25.0, lm_weight=0.8, word_score=-0.5, sil_token="|", blank_token="-")
results = decoder(emissions, lengths)
transcripts = [" ".join(hyps[0].words) for hyps in results]
token_strings = [decoder.idxs_to_tokens(hyps[0].tokens) for hyps in results]
scores = [[h.score for h in hyps] for hyps in results]
timesteps = [hyps[0].timesteps.tolist() for hyps in results]
"""


def run_script(template: str, import_line: str, **namespace):
    ns = dict(namespace)
    exec(compile(template.format(import_line=import_line), "<user script>", "exec"), ns)  # noqa: S102
    return ns


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("compat")
    arpa = d / "words.arpa"
    arpa.write_text(random_word_arpa(random.Random(3), WORDS, 2))
    lexicon = d / "lexicon.txt"
    lexicon.write_text("".join(f"{w}\t{' '.join(w)} |\n" for w in WORDS))
    tokens = d / "tokens.txt"
    tokens.write_text("\n".join(TOKENS) + "\n")
    return {"arpa": str(arpa), "lexicon": str(lexicon), "tokens": str(tokens), "dir": d}


def emissions(seed: int, n: int = 4, vocab: int = 7) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.log_softmax(torch.randn(int(torch.randint(6, 25, (1,), generator=g)), vocab, generator=g) * 2.5, -1)
            for _ in range(n)]


def pieces(labels: list[str], blank: int) -> list[str | None]:
    return [None if i == blank else x for i, x in enumerate(labels)]


def text_of(tokens, labels=LABELS) -> str:
    return " ".join("".join(labels[t] for t in tokens).replace("|", " ").split())


# ------------------------------------------------------------------------------ the done-when tests
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pyctcdecode_script_gives_asrdecodes_own_transcripts(files, seed):
    xs = emissions(seed)
    ns = run_script(PYCTC_SCRIPT, "from asrdecode.compat import build_ctcdecoder", labels=LABELS,
                    arpa_path=files["arpa"], logits_list=[x.numpy() for x in xs])
    lm = WordNGramLM.from_arpa(files["arpa"], pieces(LABELS, 0), blank_id=0, unk_offset=-10.0 * LN10,
                               unweighted_word_bonus=1.2 / 0.6)
    own = [ctc.beam_search(x[None], None, 0, beam=12, beam_threshold=10.0, fusion=[(lm, 0.6)], nbest=12)[0]
           for x in xs]
    assert ns["texts"] == [text_of(h[0].tokens) for h in own]
    assert ns["batch_texts"] == ns["texts"]
    assert ns["best_text"] == ns["texts"][0]
    assert ns["combined_score"] == pytest.approx(own[0][0].score, abs=1e-4)
    lm_part = 0.6 * lm.score_sequence(own[0][0].tokens)
    assert ns["logit_score"] == pytest.approx(own[0][0].score - lm_part, abs=1e-3)
    assert " ".join(w for w, _ in ns["word_frames"]) == ns["best_text"]
    hot = BoostingTree.from_token_sequences([([3, 6, 2, 5], 1.0)], vocab_size=7, blank_id=0)  # b e a d: 4 / 4 tokens
    own_hot = ctc.beam_search(pad(xs), torch.tensor([x.shape[0] for x in xs]), 0, beam=12, beam_threshold=10.0,
                              fusion=[(lm, 0.6), (hot, 1.0)])
    assert ns["hot_texts"] == [text_of(h[0].tokens) for h in own_hot]
    dec = ns["decoder"]
    for text, _, _, logit, total in dec.decode_beams(xs[1].numpy(), beam_width=8, hotwords=["bead"],
                                                     hotword_weight=4.0):
        tokens = [LABELS.index(c) for c in text]  # extra spaces of a beam's tokens (empty words) score 0
        fused = 0.6 * lm.score_sequence(tokens) + hot.score_sequence(tokens, final=True)
        assert total - logit == pytest.approx(fused, abs=1e-3)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_torchaudio_script_gives_asrdecodes_own_transcripts(files, seed):
    xs = emissions(seed + 10)
    lengths = torch.tensor([x.shape[0] for x in xs])
    em = pad(xs)
    ns = run_script(TORCHAUDIO_SCRIPT, "from asrdecode.compat import ctc_decoder", lexicon_path=files["lexicon"],
                    tokens_path=files["tokens"], arpa_path=files["arpa"], emissions=em, lengths=lengths)
    lm = WordNGramLM.from_arpa(files["arpa"], pieces(TOKENS, 0), blank_id=0, boundary="delimiter", delimiters=["|"],
                               lexicon=True, unweighted_word_bonus=-0.5 / 0.8)
    own = ctc.beam_search(em, lengths, 0, beam=12, beam_threshold=25.0, fusion=[(lm, 0.8)], nbest=3)
    assert ns["transcripts"] == [text_of(h[0].tokens, TOKENS) for h in own]
    assert ns["token_strings"] == [[TOKENS[t] for t in h[0].tokens] for h in own]
    assert ns["timesteps"] == [h[0].timestamps for h in own]
    for got, hyps in zip(ns["scores"], own):
        assert got == pytest.approx([h.score for h in hyps], abs=1e-3)  # log-probs in: normalisers are ~0
    assert all(set(t.split()) <= set(WORDS) for t in ns["transcripts"])


def pad(xs: list[torch.Tensor]) -> torch.Tensor:
    out = torch.zeros(len(xs), max(x.shape[0] for x in xs), xs[0].shape[1])
    for i, x in enumerate(xs):
        out[i, : x.shape[0]] = x
    return out


# ------------------------------------------------------------------------------ pyctcdecode facade
def test_label_normalisation_follows_pyctcdecode():
    assert normalize_labels(["<pad>", "|", "a", "<unk>"]) == (["", " ", "a", "\u2047"], False)
    assert normalize_labels(["_", " ", "a"]) == (["", " ", "a"], False)
    assert normalize_labels([" ", "a"]) == ([" ", "a", ""], False)  # blank appended: one more logit column
    assert normalize_labels(["[PAD]", "a", "##b", "<unk>"]) == (["", "\u2581a", "b", "\u2581\u2047\u2581"], True)
    assert normalize_labels(["", "\u2581a", "b"]) == (["", "\u2581a", "b"], True)


def test_no_lm_decoder_and_appended_blank_column():
    dec = build_ctcdecoder([" ", "a", "b"])  # blank appended as column 3
    x = torch.full((6, 4), -9.0)
    for t, k in enumerate([1, 3, 2, 0, 1, 1]):
        x[t, k] = 0.0
    assert dec.decode(torch.log_softmax(x, -1).numpy(), beam_width=4) == "ab a"
    with pytest.raises(DecodingInputError, match="vocabulary has 4 labels"):
        dec.decode(np.zeros((5, 3), dtype=np.float32))
    probs = torch.softmax(x, -1).numpy()  # probabilities are taken as such (pyctcdecode's rule)
    assert dec.decode(probs, beam_width=4) == "ab a"


def test_word_frames_and_bpe_text():
    path = [4, 4, 0, 2, 3, 0, 1, 0, 3, 2, 5]  # c c _ a b _ ' ' _ b a d
    x = torch.full((len(path), 7), -12.0)
    x[torch.arange(len(path)), torch.tensor(path)] = 0.0
    beams = build_ctcdecoder(LABELS).decode_beams(torch.log_softmax(x, -1).numpy(), beam_width=4)
    text, state, frames, logit, total = beams[0]
    assert (text, state, frames) == ("cab bad", None, [("cab", (0, 5)), ("bad", (8, 11))])
    assert logit == pytest.approx(total)  # no LM: the acoustic score is the total
    assert len({b[0] for b in beams}) == len(beams)  # one beam per text
    bpe = build_ctcdecoder(["<pad>", "\u2581ca", "b", "\u2581ba", "d"])
    y = torch.full((5, 5), -12.0)
    y[torch.arange(5), torch.tensor([1, 2, 0, 3, 4])] = 0.0
    text, _, frames, _, _ = bpe.decode_beams(torch.log_softmax(y, -1).numpy(), beam_width=4)[0]
    assert (text, frames) == ("cab bad", [("cab", (0, 2)), ("bad", (3, 5))])
    out = bpe.decode_beams_batch(None, [torch.log_softmax(y, -1).numpy()] * 2, beam_width=4)
    assert [b[0][0] for b in out] == ["cab bad"] * 2 and len(out[0][0]) == 4


def test_alpha_zero_keeps_beta_per_word(files):
    dec = build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"], alpha=0.0, beta=2.0)
    tokens = [4, 2, 3, 1, 3, 2, 5]  # "cab bad": two words
    assert dec.lm_weight * dec.word_lm.score_sequence(tokens) == pytest.approx(4.0, abs=1e-4)
    assert dec.decode(emissions(5, 1)[0].numpy(), beam_width=4) is not None


def test_reset_params_equals_a_fresh_build(files):
    xs = [x.numpy() for x in emissions(4)]
    dec = build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"], alpha=0.6, beta=1.2)
    lm_tensors = dec.word_lm.trie
    for params in ({"beta": 0.3}, {"alpha": 1.5}, {"unk_score_offset": -4.0}, {"alpha": 0.0, "beta": 2.0},
                   {"alpha": 0.7}):
        dec.reset_params(**params)
        fresh = build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"], **dec._params)
        got, want = (d.decode_beams_batch(None, xs, beam_width=6) for d in (dec, fresh))
        assert [[b[0] for b in u] for u in got] == [[b[0] for b in u] for u in want]
        assert [b[3] for u in got for b in u] == pytest.approx([b[3] for u in want for b in u], abs=1e-4)
    assert dec._params == {"alpha": 0.7, "beta": 2.0, "unk_score_offset": -4.0}
    assert dec.word_lm.trie is not lm_tensors  # rebuilt for the new offset
    kept = dec.word_lm.trie
    dec.reset_params(beta=0.5, alpha=0.2)
    assert dec.word_lm.trie is kept and dec.word_lm.unweighted_word_bonus == pytest.approx(0.5 / 0.2)  # no rebuild
    with pytest.raises(DecodingInputError, match="beta"):
        dec.reset_params(beta=float("inf"))
    with pytest.raises(DecodingInputError, match="lm_score_boundary"):
        dec.reset_params(lm_score_boundary=False)
    build_ctcdecoder(LABELS).reset_params(alpha=0.3)  # no LM: nothing to reset, as pyctcdecode


def test_unigrams_restrict_the_known_words(files):
    full = build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"])
    part = build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"], unigrams=["cab", "bad"])
    assert set(part.word_lm.words) == {"cab", "bad"} and set(full.word_lm.words) == set(WORDS)


def test_pyctcdecode_bad_inputs(files, tmp_path):
    with pytest.raises(DecodingInputError, match="duplicate"):
        build_ctcdecoder(["", "a", "a"])
    with pytest.raises(DecodingInputError, match="list of strings"):
        build_ctcdecoder("abc")
    with pytest.raises(DecodingInputError, match="alpha"):
        build_ctcdecoder(LABELS, alpha=float("nan"))
    with pytest.raises(DecodingInputError, match="lm_score_boundary"):
        build_ctcdecoder(LABELS, kenlm_model_path=files["arpa"], lm_score_boundary=False)
    with pytest.raises(FileFormatError, match="no such file"):
        build_ctcdecoder(LABELS, kenlm_model_path=str(tmp_path / "missing.arpa"))
    binary = tmp_path / "lm.bin"
    binary.write_bytes(b"mmap lm http://kheafield.com/code\0" + bytes(64))
    with pytest.raises(FileFormatError, match="KenLM binary"):
        build_ctcdecoder(LABELS, kenlm_model_path=str(binary))
    with pytest.raises(DecodingInputError, match="word boundaries"):
        build_ctcdecoder(["", "a", "b"], kenlm_model_path=files["arpa"])
    dec = build_ctcdecoder(LABELS)
    x = emissions(0, 1)[0].numpy()
    with pytest.raises(DecodingInputError, match="beam_width"):
        dec.decode(x, beam_width=0)
    with pytest.raises(DecodingInputError, match="beam_prune_logp"):
        dec.decode(x, beam_prune_logp=0.0)
    assert dec.decode(x, beam_prune_logp=-math.inf) == dec.decode(x, beam_prune_logp=-1e9)  # no pruning
    assert dec.decode(x[:0]) == "" and dec.decode_beams(x[:0]) == [("", None, [], 0.0, 0.0)]  # no frames
    with pytest.raises(DecodingInputError, match="lm_start_state"):
        dec.decode(x, lm_start_state=object())
    with pytest.raises(DecodingInputError, match="2 dimensions"):
        dec.decode(x[None])
    with pytest.raises(DecodingInputError, match=r"NaN or \+inf"):
        dec.decode(np.full_like(x, np.nan))
    masked = x.copy()
    masked[:, 2] = -np.inf  # a suppressed label: floored at log(1e-15), as pyctcdecode does
    assert dec.decode(masked) == dec.decode(np.where(np.isinf(masked), -1e30, masked))
    with pytest.raises(DecodingInputError, match="all -inf"):
        dec.decode(np.full_like(x, -np.inf))
    with pytest.raises(DecodingInputError, match="float"):
        dec.decode(x.astype(np.int64))
    with pytest.raises(DecodingInputError, match="hotword 'xyz'"):
        dec.decode(x, hotwords=["xyz"])
    with pytest.raises(DecodingInputError, match="list of strings"):
        dec.decode(x, hotwords="cab")
    with pytest.raises(DecodingInputError, match="prune_history"):
        dec.decode_beams(x, prune_history=None)


# ------------------------------------------------------------------------------ torchaudio facade
def test_raw_logits_give_the_same_words_and_scores_on_their_scale(files):
    xs = emissions(7)
    logits = pad([x * 1.0 + 3.0 * torch.randn(1) for x in xs])  # a per-frame shift: logits, not log-probs
    lengths = torch.tensor([x.shape[0] for x in xs])
    dec = ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], beam_size=8)
    a, b = dec(pad(xs), lengths), dec(logits, lengths)
    lse = torch.logsumexp(logits, -1)
    for i, (ha, hb) in enumerate(zip(a, b)):
        assert ha[0].words == hb[0].words
        assert hb[0].score == pytest.approx(ha[0].score + float(lse[i, : lengths[i]].sum()), abs=1e-3)


def test_lexicon_free_token_lm_sil_score_and_no_lm(files, tmp_path):
    token_arpa = tmp_path / "tokens.arpa"
    token_arpa.write_text(random_word_arpa(random.Random(1), TOKENS[1:], 2))
    xs = emissions(3)
    em, lengths = pad(xs), torch.tensor([x.shape[0] for x in xs])
    dec = ctc_decoder(None, TOKENS, lm=str(token_arpa), lm_weight=0.7, beam_size=8, beam_size_token=4)
    lm = NGramLM.from_arpa(str(token_arpa), token_map=TokenMap.from_words(pieces(TOKENS, 0), 0))
    own = ctc.beam_search(em, lengths, 0, beam=8, fusion=[(lm, 0.7)], token_beam=4, beam_threshold=50.0)
    assert [h[0].tokens.tolist() for h in dec(em, lengths)] == [h[0].tokens for h in own]
    sil = ctc_decoder(None, TOKENS, sil_score=1.5, beam_size=8)
    own_sil = ctc.beam_search(em, lengths, 0, beam=8, beta=0.0, beam_threshold=50.0, fusion=[(
        BoostingTree.from_token_sequences([([1], 1.5)], vocab_size=7, blank_id=0), 1.0)])
    got = sil(em, lengths)
    assert [h[0].tokens.tolist() for h in got] == [h[0].tokens for h in own_sil]
    assert [h[0].words for h in got] == [text_of(h[0].tokens, TOKENS).split() for h in own_sil]
    lex_only = ctc_decoder(files["lexicon"], TOKENS, lm=None, beam_size=64)  # lexicon without an LM
    assert all(set(h[0].words) <= set(WORDS) and h[0].score > -math.inf for h in lex_only(em, lengths))
    narrow = ctc_decoder(files["lexicon"], TOKENS, lm=None, beam_size=8)(em, lengths)
    assert narrow[2][0].score == -math.inf and narrow[2][0].words == [] and len(narrow[2][0].tokens) == 0
    fusion_lm = ctc_decoder(None, TOKENS, lm=lm, lm_weight=0.7, beam_size=8, beam_size_token=4)
    assert [h[0].tokens.tolist() for h in fusion_lm(em, lengths)] == [h[0].tokens for h in own]
    assert [h[0].words for h in fusion_lm(em, lengths.tolist())] == [h[0].words for h in fusion_lm(em, lengths)]


def test_lexicon_words_outside_the_lm_score_as_unk_and_lm_words_outside_the_lexicon_are_out(files, tmp_path):
    from asrdecode.lm.word import DEFAULT_UNK_OFFSET

    lexicon = tmp_path / "lexicon.txt"
    lexicon.write_text("cab c a b |\nbad b a d |\nbed b e d |\n")  # "bed" is not an LM word; the LM has more
    dec = ctc_decoder(str(lexicon), TOKENS, lm=files["arpa"], lm_weight=1.0)
    word_lm = dec.fusion[0][0]
    assert sorted(word_lm.words) == ["bad", "bed", "cab"]
    own = WordNGramLM.from_arpa(files["arpa"], pieces(TOKENS, 0), blank_id=0, boundary="delimiter", delimiters=["|"])
    # the plain word LM scores "bed" as <unk> (KenLM's rule, history included) + its unknown-word
    # offsets; the lexicon one as <unk> alone
    for seq in ([3, 6, 5, 1], [4, 2, 3, 1, 3, 6, 5, 1, 3, 2, 5], [3, 6, 5, 1, 3, 6, 5]):
        n_bed = sum(1 for a, b, c in zip(seq, seq[1:], seq[2:]) if (a, b, c) == (3, 6, 5))
        offsets = n_bed * (DEFAULT_UNK_OFFSET + own.unk_char_offset * 3)
        assert word_lm.score_sequence(seq) == pytest.approx(own.score_sequence(seq) - offsets, abs=1e-4)
    assert word_lm.score_sequence([5, 2, 3, 1]) == -math.inf  # "dab": an LM word outside the lexicon


def test_torchaudio_bad_inputs(files, tmp_path):
    with pytest.raises(DecodingInputError, match="blank_token '-'"):
        ctc_decoder(None, ["<b>", "|", "a"])
    with pytest.raises(DecodingInputError, match="sil_token"):
        ctc_decoder(None, ["-", "a"], sil_token="|")
    with pytest.raises(FileFormatError, match="lm_dict: no such file"):
        ctc_decoder(None, TOKENS, lm_dict=str(tmp_path / "missing.txt"))
    with pytest.raises(DecodingInputError, match="nbest"):
        ctc_decoder(None, TOKENS, nbest=5, beam_size=2)
    with pytest.raises(DecodingInputError, match="unk_word"):
        ctc_decoder(None, TOKENS, unk_word=None)
    with pytest.raises(DecodingInputError, match="lm must be"):
        ctc_decoder(None, TOKENS, lm=42)
    with pytest.raises(FileFormatError, match="no such file"):
        ctc_decoder(str(tmp_path / "none.txt"), TOKENS)
    bad = tmp_path / "bad_lexicon.txt"
    bad.write_text("cab c a b |\nbad b a x |\n")
    with pytest.raises(FileFormatError, match=r"bad_lexicon.txt.*2.*\['x'\]"):
        ctc_decoder(str(bad), TOKENS)
    phones = tmp_path / "phones.txt"
    phones.write_text("cab c a |\n")
    with pytest.raises(DecodingInputError, match="pronunciation lexicon"):
        ctc_decoder(str(phones), TOKENS)
    dec = ctc_decoder(None, TOKENS)
    with pytest.raises(DecodingInputError, match="float32"):
        dec(torch.zeros(1, 3, 7, dtype=torch.float64))
    with pytest.raises(DecodingInputError, match="7"):
        dec(torch.zeros(1, 3, 5))
    with pytest.raises(DecodingInputError, match="batch, frames, tokens"):
        dec(torch.zeros(3, 7))


# ------------------------------------------------------------------------------ peers (slow)
def peaky(seed: int, texts: list[str], labels: list[str]) -> list[np.ndarray]:
    g = torch.Generator().manual_seed(seed)
    idx = {c: i for i, c in enumerate(labels)}
    out = []
    for text in texts:
        path = [0]
        for c in text:
            path += [idx[c], 0]
        x = torch.randn(len(path), len(labels), generator=g)
        x[torch.arange(len(path)), torch.tensor(path)] += 10.0
        out.append(torch.log_softmax(x, -1).numpy())
    return out


@pytest.mark.slow
def test_pyctcdecode_script_same_transcripts_with_the_real_pyctcdecode_on_clear_speech(files):
    pytest.importorskip("pyctcdecode")
    pytest.importorskip("kenlm")
    rng = random.Random(0)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(20)]
    xs = peaky(1, sentences, LABELS)
    ours = run_script(PYCTC_SCRIPT, "from asrdecode.compat import build_ctcdecoder", labels=LABELS,
                      arpa_path=files["arpa"], logits_list=xs)
    peer = run_script(PYCTC_SCRIPT, "from pyctcdecode import build_ctcdecoder", labels=LABELS,
                      arpa_path=files["arpa"], logits_list=xs)
    assert ours["texts"] == peer["texts"] == sentences
    assert ours["batch_texts"] == peer["batch_texts"]
    assert ours["hot_texts"] == peer["hot_texts"]
    assert [w for w, _ in ours["word_frames"]] == [w for w, _ in peer["word_frames"]]
    assert [f[0] for _, f in ours["word_frames"]] == [f[0] for _, f in peer["word_frames"]]


@pytest.mark.slow
def test_torchaudio_script_same_transcripts_as_flashlight_text_on_clear_speech(files):
    fl = pytest.importorskip("flashlight.lib.text.decoder")
    from flashlight.lib.text.decoder.kenlm import KenLM
    from flashlight.lib.text.dictionary import Dictionary, create_word_dict, load_words

    rng = random.Random(2)
    sentences = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(20)]
    labels = [c if c != " " else "|" for c in LABELS]
    xs = [torch.from_numpy(x) for x in peaky(3, [s.replace(" ", "|") + "|" for s in sentences], labels)]
    lengths = torch.tensor([x.shape[0] for x in xs])
    ours = run_script(TORCHAUDIO_SCRIPT, "from asrdecode.compat import ctc_decoder", lexicon_path=files["lexicon"],
                      tokens_path=files["tokens"], arpa_path=files["arpa"], emissions=pad(xs), lengths=lengths)
    # the peer: flashlight-text's LexiconDecoder built as torchaudio's ctc_decoder builds it
    tok = Dictionary(TOKENS)
    lex = load_words(files["lexicon"])
    word_dict = create_word_dict(lex)
    lm = KenLM(files["arpa"], word_dict)
    trie = fl.Trie(len(TOKENS), tok.get_index("|"))
    start = lm.start(False)
    for w, spellings in lex.items():
        for sp in spellings:
            wid = word_dict.get_index(w)
            trie.insert([tok.get_index(t) for t in sp], wid, lm.score(start, wid)[1])
    trie.smear(fl.SmearingMode.MAX)
    opts = fl.LexiconDecoderOptions(beam_size=12, beam_size_token=len(TOKENS), beam_threshold=25.0, lm_weight=0.8,
                                    word_score=-0.5, unk_score=-math.inf, sil_score=0.0, log_add=False,
                                    criterion_type=fl.CriterionType.CTC)
    dec = fl.LexiconDecoder(opts, trie, lm, tok.get_index("|"), tok.get_index("-"), word_dict.get_index("<unk>"), [],
                            False)
    peer = []
    for x in xs:
        x = x.contiguous()
        res = dec.decode(x.data_ptr(), x.shape[0], x.shape[1])
        peer.append(" ".join(word_dict.get_entry(w) for w in res[0].words if w >= 0))
    assert ours["transcripts"] == peer == sentences


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 6), max_size=30), st.sampled_from(["delimiter", "prefix"]))
def test_word_spans_are_the_boundaries_words_with_their_frames(tokens, style):
    from asrdecode.compat._common import word_spans
    from asrdecode.lm.word import detect_boundaries

    vocab = [None, " ", "a", "b", "c", "d", "e"] if style == "delimiter" else [None, "\u2581", "a", "\u2581b", "c",
                                                                                "\u2581de", "e"]
    bounds = detect_boundaries(vocab, style, [" "] if style == "delimiter" else None)
    tokens = [t for t in tokens if t != 0]
    times = list(range(0, 2 * len(tokens), 2))
    spans = word_spans(tokens, times, bounds)
    assert [w for w, _, _ in spans] == bounds.words(tokens)
    for (_, s, e), (_, s2, _) in zip(spans, spans[1:] + [("", 10**9, 0)]):
        assert s < e <= s2  # ordered, non-empty, not overlapping
    texts = [bounds.text[t] for t in tokens]
    for w, s, e in spans:  # each word's first and last frames carry its first and last characters' tokens
        assert w.startswith(texts[s // 2]) and w.endswith(texts[(e - 1) // 2])


# ------------------------------------------------------------------ issue 29: save_to_dir / load_from_dir, lm_dict
def test_save_to_dir_and_load_from_dir_give_the_same_decoder(files, tmp_path):
    import json

    from asrdecode.compat.pyctcdecode import BeamSearchDecoderCTC

    xs = [x.numpy() for x in emissions(6)]
    for name, kw in (("lm", {"alpha": 0.6, "beta": 1.2, "unk_score_offset": -7.0}),
                     ("unigrams", {"unigrams": ["cab", "bad", "ace"], "alpha": 0.9, "beta": 0.4}), ("none", None)):
        dec = (build_ctcdecoder(LABELS) if kw is None else build_ctcdecoder(LABELS, files["arpa"], **kw))
        folder = tmp_path / name
        folder.mkdir()
        dec.save_to_dir(str(folder))
        assert json.loads((folder / "alphabet.json").read_text())["labels"] == dec.labels
        assert (folder / "language_model").is_dir() == (kw is not None)
        back = BeamSearchDecoderCTC.load_from_dir(str(folder))
        assert back.labels == dec.labels and back._params == dec._params
        got, want = (d.decode_beams_batch(None, xs, beam_width=6) for d in (back, dec))
        assert [[b[0] for b in u] for u in got] == [[b[0] for b in u] for u in want]
        assert [b[3] for u in got for b in u] == pytest.approx([b[3] for u in want for b in u], abs=1e-4)
        if kw and "unigrams" in kw:
            assert set(back.word_lm.words) == {"cab", "bad", "ace"}
    # saving twice into one folder, a missing folder, damaged files
    with pytest.raises(DecodingInputError, match="exists already"):
        build_ctcdecoder(LABELS, files["arpa"]).save_to_dir(str(tmp_path / "lm"))
    with pytest.raises(DecodingInputError, match="not a folder"):
        build_ctcdecoder(LABELS).save_to_dir(str(tmp_path / "nope"))
    with pytest.raises(FileFormatError, match="alphabet.json: no such file"):
        BeamSearchDecoderCTC.load_from_dir(str(tmp_path / "nope"))
    (tmp_path / "lm" / "alphabet.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="not JSON"):
        BeamSearchDecoderCTC.load_from_dir(str(tmp_path / "lm"))
    (tmp_path / "lm" / "alphabet.json").write_text(json.dumps({"labels": "abc"}))
    with pytest.raises(FileFormatError, match="labels"):
        BeamSearchDecoderCTC.load_from_dir(str(tmp_path / "lm"))
    (tmp_path / "unigrams" / "language_model" / "extra.arpa").write_text("x")
    with pytest.raises(FileFormatError, match="one language model file, found 2"):
        BeamSearchDecoderCTC.load_from_dir(str(tmp_path / "unigrams"))
    attrs = tmp_path / "unigrams" / "language_model" / "attrs.json"
    attrs.write_text(json.dumps({"alpha": 0.5}))
    with pytest.raises(FileFormatError, match="missing beta, unk_score_offset"):
        BeamSearchDecoderCTC.load_from_dir(str(tmp_path / "unigrams"))


@pytest.mark.slow
def test_pyctcdecode_saved_folder_loads_here(files, tmp_path):
    """A folder written by pyctcdecode itself (its LM file an ARPA) loads with the same words."""
    pyctc = pytest.importorskip("pyctcdecode")
    from asrdecode.compat.pyctcdecode import BeamSearchDecoderCTC

    theirs = pyctc.build_ctcdecoder(LABELS, files["arpa"], alpha=0.6, beta=1.2)
    theirs.save_to_dir(str(tmp_path))
    ours = BeamSearchDecoderCTC.load_from_dir(str(tmp_path))
    assert ours._params == {"alpha": 0.6, "beta": 1.2, "unk_score_offset": -10.0}
    saved = (tmp_path / "language_model" / "unigrams.txt").read_text().split()
    assert set(ours.word_lm.words) == set(saved) - {"<s>", "</s>", "<unk>"} and len(ours.word_lm.words) > 3


def test_lm_dict_restricts_the_lms_words(files, tmp_path):
    xs = emissions(7)
    em, lengths = pad(xs), torch.tensor([x.shape[0] for x in xs])
    lm_dict = tmp_path / "lm_dict.txt"
    lm_dict.write_text("cab\nbad 12\n\nace\n")
    dec = ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_dict=str(lm_dict), lm_weight=1.0)
    word_lm = dec.fusion[0][0]
    own = ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_weight=1.0).fusion[0][0]
    # lexicon words outside lm_dict score as <unk>; those inside as the LM says
    assert set(word_lm.words) == set(WORDS)
    cab = [4, 2, 3, 1]
    assert word_lm.score_sequence(cab) == pytest.approx(own.score_sequence(cab), abs=1e-4)
    dab = [5, 2, 3, 1]
    assert word_lm.score_sequence(dab) != pytest.approx(own.score_sequence(dab), abs=1e-4)
    assert len(dec(em, lengths)) == len(xs)
    bad = tmp_path / "bad.txt"
    bad.write_text("cab\nzebra\n")
    with pytest.raises(DecodingInputError, match="not in the lexicon.*zebra"):
        ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_dict=str(bad))
    twice = tmp_path / "twice.txt"
    twice.write_text("cab\ncab\n")
    with pytest.raises(FileFormatError, match="twice.txt:2"):
        ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_dict=str(twice))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    with pytest.raises(FileFormatError, match="no entries"):
        ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_dict=str(empty))
    with pytest.raises(DecodingInputError, match="lm_dict must be"):
        ctc_decoder(files["lexicon"], TOKENS, lm=files["arpa"], lm_dict=3)
    # lexicon-free: the entries are tokens; the token LM keeps only those
    token_arpa = tmp_path / "tokens.arpa"
    token_arpa.write_text(random_word_arpa(random.Random(1), TOKENS[1:], 2))
    tok_dict = tmp_path / "tok_dict.txt"
    tok_dict.write_text("|\na\nb\n")
    free = ctc_decoder(None, TOKENS, lm=str(token_arpa), lm_dict=str(tok_dict), lm_weight=0.7)
    full = ctc_decoder(None, TOKENS, lm=str(token_arpa), lm_weight=0.7)
    assert free.fusion[0][0].score_sequence([2, 3]) == pytest.approx(full.fusion[0][0].score_sequence([2, 3]), abs=1e-4)
    assert free.fusion[0][0].score_sequence([4]) != pytest.approx(full.fusion[0][0].score_sequence([4]), abs=1e-4)
    with pytest.raises(DecodingInputError, match="not tokens"):
        ctc_decoder(None, TOKENS, lm=str(token_arpa), lm_dict=str(lm_dict))
