"""Peer check (slow, needs NeMo): NGramLM.advance rows equal NeMo's NGramGPULanguageModel on the same ARPA.

Run in the NeMo venv: ``/work/venvs/nemo/bin/python -m pytest -m slow tests/lm/test_lm_vs_nemo.py``.
"""

from __future__ import annotations

import contextlib
import io
import random

import pytest
import torch

from asrdecode.lm import NGramLM
from test_lm_ngram import random_arpa

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("order", [2, 3, 4, 6])
def test_advance_matches_nemo(order, tmp_path):
    ngram = pytest.importorskip("nemo.collections.asr.parts.submodules.ngram_lm")
    rng = random.Random(order)
    n_words = 9
    # NeMo accepts <unk> only as a 1-gram, so these models have none (no model token is unknown)
    text = random_arpa(rng, n_words, order, max_per_order=150, suffix_closed=True, with_unk=False)
    path = tmp_path / "lm.arpa"
    path.write_text(text)
    with contextlib.redirect_stderr(io.StringIO()):
        nm = ngram.NGramGPULanguageModel.from_arpa(str(path), vocab_size=n_words)
    # model vocabulary = the LM's words + a blank last (NeMo's layout: its columns exclude the blank)
    lm = NGramLM.from_arpa(path, vocab_size=n_words + 1, blank_id=n_words)
    ours, theirs = lm.initial_states(16), nm.get_init_states(16, bos=True)
    for _ in range(10):
        s1, n1 = lm.advance(ours)
        s2, n2 = nm.advance(theirs)
        torch.testing.assert_close(s1[:, :n_words], s2.to(s1.dtype), atol=1e-4, rtol=0)
        torch.testing.assert_close(lm.final(ours), nm.get_final(theirs).to(s1.dtype), atol=1e-4, rtol=0)
        tok = torch.tensor([rng.randrange(n_words) for _ in range(16)])
        ours, theirs = n1[torch.arange(16), tok], n2[torch.arange(16), tok]
