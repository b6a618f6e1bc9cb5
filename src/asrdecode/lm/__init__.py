"""N-gram language models and phrase boosting as fusion models (see :mod:`asrdecode.fusion`).

* :mod:`.arpa`: read/write ARPA files, estimate them with KenLM's ``lmplz``.
* :mod:`.tokens`: :class:`TokenMap`, how model token ids are spelled as LM words.
* :mod:`.ngram`: :class:`NGramLM`, the tensor n-gram LM (whole-vocabulary batched scoring).
* :mod:`.boosting`: :class:`BoostingTree`, the Aho-Corasick phrase boosting tree.
* :mod:`.word`: :class:`WordNGramLM`, a word n-gram LM over the model's token ids (word boundaries
  from the vocabulary).
* :mod:`.word_cache`: built word LMs saved to a file and cached per user (keyed by the ARPA's hash).
"""

from .boosting import BoostingTree
from .arpa import ArpaModel, estimate_arpa, find_kenlm_tool, prune_vocabulary, read_arpa, write_arpa
from .ngram import NGramLM
from .tokens import TokenMap, write_token_corpus
from .word import WordNGramLM
from .word_cache import cached_word_lm, load_word_lm, save_word_lm

__all__ = [
    "ArpaModel",
    "read_arpa",
    "write_arpa",
    "estimate_arpa",
    "find_kenlm_tool",
    "prune_vocabulary",
    "TokenMap",
    "write_token_corpus",
    "NGramLM",
    "BoostingTree",
    "WordNGramLM",
    "cached_word_lm",
    "save_word_lm",
    "load_word_lm",
]
