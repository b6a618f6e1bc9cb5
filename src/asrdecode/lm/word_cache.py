"""A built :class:`~asrdecode.lm.WordNGramLM` saved as one file, and a per-user cache of them.

:func:`cached_word_lm` builds the word LM of an ARPA file once per (file contents, vocabulary,
options) and keeps it in the cache of :mod:`asrdecode.models.graph_cache` (``$ASRDECODE_CACHE`` or
``~/.cache/asrdecode``; keyed by the file's SHA-256; a stale or corrupt entry is rebuilt, never
used). A later load memory-maps the arrays (torch's mmap loading): no ARPA parsing, no trie
building. :func:`save_word_lm` / :func:`load_word_lm` are the file format (``torch.save``, loadable
with ``weights_only=True``): every tensor of the model and its parts, the scalars as they are, the
word list as one UTF-8 tensor.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import torch

from ..errors import DecodingInputError, FileFormatError
from ._automaton import BackoffAutomaton
from .arpa import BOS, EOS, KENLM_BINARY_MAGIC, KENLM_BINARY_MESSAGE, SCORES, UNK, drop_words, read_arpa
from .ngram import NGramLM
from .._validation import ValidationMark
from .tokens import TokenMap
from .word import WordBoundaries, WordNGramLM, token_pieces

__all__ = ["save_word_lm", "load_word_lm", "cached_word_lm", "cached_word_lm_fusion", "FORMAT"]

#: the file format :func:`save_word_lm` writes
FORMAT = "asrdecode.WordNGramLM/1"
_CLASSES = {c.__name__: c for c in (WordNGramLM, NGramLM, BackoffAutomaton, TokenMap, WordBoundaries)}
_SCALARS = (int, float, bool, str, type(None))


def _words_tensor(words: list[str]) -> torch.Tensor:
    if any("\n" in w for w in words):
        raise DecodingInputError("a word contains a newline; the word LM cannot be saved")
    return torch.frombuffer(bytearray("\n".join(words).encode("utf-8")), dtype=torch.uint8) if words \
        else torch.zeros(0, dtype=torch.uint8)


def _flatten(obj: Any, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    """``obj``'s fields as a tree of plain values; tensors go to ``tensors`` under dotted names."""
    out: dict[str, Any] = {"class": type(obj).__name__}
    fields: dict[str, Any] = {}
    for k, v in vars(obj).items():
        name = prefix + k
        if isinstance(v, ValidationMark):
            continue  # transient: a loaded model is validated again before an engine reads it
        if isinstance(v, torch.Tensor):
            tensors[name] = v.detach().cpu()
            fields[k] = ("tensor", name)
        elif type(v).__name__ in _CLASSES and type(v) is _CLASSES[type(v).__name__]:
            fields[k] = ("object", _flatten(v, name + ".", tensors))
        elif isinstance(obj, TokenMap) and k in ("_words", "_ids"):
            continue  # rebuilt from the word LM's words
        elif isinstance(obj, WordNGramLM) and k == "words":
            tensors[name] = _words_tensor(v)
            fields[k] = ("words", name)
        elif isinstance(v, _SCALARS) or (isinstance(v, (list, tuple)) and all(isinstance(x, _SCALARS) for x in v)):
            fields[k] = ("value", v)
        else:
            raise DecodingInputError(f"cannot save field {name} of type {type(v).__name__}")
    out["fields"] = fields
    return out


def _rebuild(tree: dict, tensors: dict[str, torch.Tensor], words: list[str]) -> Any:
    cls = _CLASSES.get(str(tree.get("class"))) if isinstance(tree, dict) else None
    if cls is None or not isinstance(tree.get("fields"), dict):
        raise ValueError(f"unknown object {tree.get('class') if isinstance(tree, dict) else tree!r}")
    obj = object.__new__(cls)
    d: dict[str, Any] = {}
    for k, (kind, v) in tree["fields"].items():
        if kind == "tensor":
            d[k] = tensors[v]
        elif kind == "object":
            d[k] = _rebuild(v, tensors, words)
        elif kind == "words":
            d[k] = words
        elif kind == "value":
            d[k] = v
        else:
            raise ValueError(f"unknown field kind {kind!r}")
    if cls is TokenMap:
        d["_words"] = list(words) + [None]
        d["_ids"] = {w: i for i, w in enumerate(words)}
    obj.__dict__.update(d)
    return obj


def save_word_lm(lm: WordNGramLM, path: str | os.PathLike) -> None:
    """Write ``lm`` to ``path`` (see the module docstring)."""
    if not isinstance(lm, WordNGramLM):
        raise DecodingInputError(f"lm must be a WordNGramLM, got {type(lm).__name__}")
    tensors: dict[str, torch.Tensor] = {}
    tree = _flatten(lm, "", tensors)
    torch.save({"format": FORMAT, "tree": tree, "tensors": tensors}, path)


def load_word_lm(path: str | os.PathLike, device: torch.device | str | None = None) -> WordNGramLM:
    """A word LM written by :func:`save_word_lm` (tensors memory-mapped on CPU).

    Raises:
        FileFormatError: not such a file, or a damaged one.
    """
    try:
        d = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:
        raise FileFormatError(path, None, f"not a word LM file ({e})") from e
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise FileFormatError(path, None, f"not a word LM file (missing format tag {FORMAT})")
    try:
        tensors = d["tensors"]
        words_t = tensors["words"]
        words = words_t.numpy().tobytes().decode("utf-8").split("\n") if words_t.numel() else []
        lm = _rebuild(d["tree"], tensors, words)
        if not isinstance(lm, WordNGramLM) or lm.word_lm.token_map.vocab_size != len(words) + 1:
            raise ValueError("the parts do not fit together")
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise FileFormatError(path, None, f"bad word LM file ({e})") from e
    return lm if device is None or torch.device(device).type == "cpu" else lm.to(device)


def cached_word_lm(path: str | os.PathLike, tokenizer: Any, *, vocab_size: Optional[int] = None,
                   blank_id: Optional[int] = None, keep_words: Optional[Iterable[str]] = None,
                   log: Optional[Callable[[str], None]] = None, device: torch.device | str | None = None,
                   **options: Any) -> WordNGramLM:
    """``WordNGramLM.from_arpa(path, tokenizer, ...)``, built once and then loaded from the cache.

    The cache key holds the file's SHA-256, the text of every token and every option, so an edited
    ARPA file or another vocabulary builds a new entry. ``options`` as :meth:`WordNGramLM.from_arpa_model`
    (JSON-able values); ``keep_words``: LM words outside it are dropped first (``drop_words``; markers
    kept), pyctcdecode's ``unigrams``. ``log`` gets the build messages (default: stderr).
    """
    from ..models.graph_cache import cached_file, file_digest

    p = Path(os.fspath(path))
    if not p.is_file():
        raise FileFormatError(str(p), None, "no such word LM file")
    with open(p, "rb") as f:  # the common wrong file, named before the "building" message
        if f.read(len(KENLM_BINARY_MAGIC)) == KENLM_BINARY_MAGIC:
            raise FileFormatError(str(p), None, KENLM_BINARY_MESSAGE)
    pieces = token_pieces(tokenizer, vocab_size, blank_id)
    if blank_id is None:
        blank_id = getattr(tokenizer, "blank_id", None)
    opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in sorted(options.items())}
    keep = None
    if keep_words is not None:
        if isinstance(keep_words, str):
            raise DecodingInputError("keep_words must be a collection of words, got a string")
        keep = sorted(set(keep_words))
    inputs = {"artefact": FORMAT, "arpa": file_digest(p), "scores": SCORES, "pieces": pieces, "blank_id": blank_id, "options": opts,
              "keep_words": None if keep is None else hashlib.sha256("\n".join(keep).encode("utf-8")).hexdigest()}

    def build(tmp: Path) -> None:
        model = read_arpa(p)
        if keep is not None:
            kept = set(keep) | {BOS, EOS, UNK}
            model = drop_words(model, [w for w in model.vocab if w not in kept])
        save_word_lm(WordNGramLM.from_arpa_model(model, pieces, blank_id=blank_id, **options), tmp)

    entry = cached_file("word-lm", inputs, build, what=f"the word LM of {p.name}", log=log)
    return load_word_lm(entry.path, device)


def cached_word_lm_fusion(path: str | os.PathLike, tokenizer: Any, *, vocab_size: int, blank_id: Optional[int],
                          weight: float, word_bonus: float = 0.0, **kwargs: Any) -> tuple[WordNGramLM, float]:
    """:func:`asrdecode.lm.word.word_lm_fusion` (the CLI's ``--word-lm`` entry, ``word_bonus`` on the fused
    scale) with the built model from the per-user cache after the first time."""
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileFormatError(p, None, "no such word LM file")
    for name, v in (("weight", weight), ("word_bonus", word_bonus)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DecodingInputError(f"{name} must be a number, got {v!r}")
    if word_bonus and float(weight) == 0.0:
        raise DecodingInputError("a word bonus needs a non-zero word LM weight")
    lm = cached_word_lm(p, tokenizer, vocab_size=vocab_size, blank_id=blank_id, **kwargs)
    return lm.weighted(float(weight), word_bonus=float(word_bonus)) if weight else (lm, 0.0)
