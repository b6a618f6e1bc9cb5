"""prune_vocabulary keeps the most likely words and only the n-grams made of them."""

from __future__ import annotations

import pytest

from asrdecode import DecodingInputError
from asrdecode.lm import prune_vocabulary, read_arpa, write_arpa

ARPA = """\\data\\
ngram 1=6
ngram 2=3

\\1-grams:
-1.0\t<s>\t-0.3
-1.0\t</s>
-2.0\t<unk>
-0.5\ta\t-0.2
-0.7\tb\t-0.1
-1.5\tc

\\2-grams:
-0.2\t<s> a
-0.1\ta b
-0.3\tb c

\\end\\
"""


def test_prune_keeps_top_words_and_their_ngrams(tmp_path):
    path = tmp_path / "lm.arpa"
    path.write_text(ARPA)
    model = read_arpa(path)
    pruned = prune_vocabulary(model, 4)  # <s>, </s>, a, b (unigram order); <unk> and c dropped
    assert sorted(pruned.vocab) == ["</s>", "<s>", "a", "b"]
    out = write_arpa(pruned, tmp_path / "pruned.arpa")
    text = out.read_text()
    assert "<s> a" in text and "a b" in text and "b c" not in text and "<unk>" not in text
    again = read_arpa(out)  # a valid ARPA file: counts, prefixes and words consistent
    assert again.vocab == pruned.vocab
    with pytest.raises(DecodingInputError, match="n_words"):
        prune_vocabulary(model, 0)
