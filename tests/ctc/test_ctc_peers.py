"""Slow checks against the peers (pyctcdecode + kenlm, flashlight-text) on the same emissions and LM.

Run with ``python3 -m pytest -m slow tests/ctc/test_ctc_peers.py`` (needs the bench extras).
"""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pytest

from asrdecode import ctc
from asrdecode.lm import NGramLM

ROOT = Path(__file__).resolve().parents[2]
ARPA_GZ = ROOT / "src" / "asrdecode" / "models" / "assets" / "token-4gram.arpa.gz"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not ARPA_GZ.exists():
        pytest.skip("the bundled token LM is not built")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import ctc_beam as cb

    arpa = tmp_path_factory.mktemp("lm") / "token-4gram.arpa"
    with gzip.open(ARPA_GZ, "rb") as src, open(arpa, "wb") as dst:
        shutil.copyfileobj(src, dst)
    from asrdecode.tokenizers import SentencePieceTokenizer

    tok = SentencePieceTokenizer(cb.ASSETS / "tokenizer.model")
    refs = [t for _, t in cb.read_manifests()][:30]
    lps = [x.float() for x in cb.synthetic_emissions(refs, tok, tok.blank_id)]
    lm = NGramLM.from_arpa(arpa, vocab_size=tok.vocab_size, blank_id=tok.blank_id)
    return cb, arpa, tok, refs, lps, lm


@pytest.mark.parametrize("peer", ["pyctcdecode", "flashlight"])
def test_wer_not_worse_than_peer(setup, peer):
    cb, arpa, tok, refs, lps, lm = setup
    blank, vocab = tok.blank_id, tok.vocab_size
    if peer == "pyctcdecode":
        pytest.importorskip("pyctcdecode")
        pytest.importorskip("kenlm")
        dec = cb.PyCtc(arpa, vocab, blank, 0.5, True)
    else:
        pytest.importorskip("flashlight.lib.text.decoder")
        dec = cb.Flashlight(arpa, vocab, blank, 0.5)
    ours, _ = cb.run_ours(lps, blank, lm, 0.5, 16, 32, 20.0)
    theirs, _ = dec.run(lps, 16, 20.0)
    ours_wer = cb.wer(cb.texts_of(tok, ours), refs)
    their_wer = cb.wer(cb.texts_of(tok, theirs), refs)
    assert ours_wer <= their_wer, (ours_wer, their_wer)
    greedy = ctc.greedy(*cb.pad(lps), blank)
    assert ours_wer < cb.wer(cb.texts_of(tok, [h.tokens for h in greedy]), refs)
