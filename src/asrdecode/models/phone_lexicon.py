"""Pronunciations in hama's phone set: the shipped lexicon of the bundled word LM and hama's G2P.

``assets/hama-lexicon.txt.gz`` holds ``word phone ...`` lines (phones are symbols of hama's phone
recogniser) for every word of the bundled word 3-gram, made once by ``recipes/hama_lexicon.py``
with :func:`g2p_pronunciations`. Words outside it (another LM) are spelled by hama's G2P, with a
progress bar, when their graph is built (the graph is then cached, :mod:`.graph_cache`).

hama is an optional dependency: :func:`require_hama` names ``pip install -e '.[hama]'`` in the asrdecode checkout.
"""

from __future__ import annotations

import functools
import gzip
import os
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..errors import AsrDecodeError, FileFormatError

__all__ = ["HamaMissingError", "require_hama", "hama_phone_symbols", "g2p_pronunciations", "read_phone_lexicon",
           "write_phone_lexicon", "SHIPPED_LEXICON"]

SHIPPED_LEXICON = Path(__file__).parent / "assets" / "hama-lexicon.txt.gz"
#: symbols of hama's recogniser that are never a word's phone
NON_PHONES = frozenset({"<blank>", "<wb>", "<pad>", "<sos>", "<eos>", "<unk>", " ", ",", "%"})


class HamaMissingError(AsrDecodeError, ImportError):
    """The optional ``hama`` package (hama's phone recogniser and G2P) is not installed."""


def require_hama(what: str = "the phone-ctc model") -> Any:
    """Import and return the ``hama`` module, or raise :class:`HamaMissingError` naming the extra."""
    try:
        import hama
    except ImportError as err:
        raise HamaMissingError(f"{what} needs hama's phone recogniser: pip install -e '.[hama]' in the asrdecode checkout "
                               f"(import failed: {err})") from None
    return hama


@functools.lru_cache(maxsize=1)
def hama_phone_symbols() -> tuple[str, ...]:
    """The recogniser's output symbols in class order (191, ``<blank>`` and ``<wb>`` included)."""
    return tuple(require_hama().ASRModel().decoder_tokens)


def _fast_g2p() -> Any:
    """hama's G2P model with two pure speed-ups that leave its output unchanged: the vocabulary's
    token maps built once (hama rebuilds a dict per character) and inputs not padded to 128
    positions (the encoder masks padding; ``tests/models/test_phone_bundle.py`` checks equality)."""
    hama = require_hama("G2P pronunciations")
    from hama.tokenizer import EncodedText, TextTokenizer
    from hama.vocab import Vocabulary

    class _Vocab(Vocabulary):
        @functools.cached_property
        def encoder_token_to_id(self) -> dict[str, int]:
            return {t: i for i, t in enumerate(self.encoder)}

        @functools.cached_property
        def decoder_token_to_id(self) -> dict[str, int]:
            return {t: i for i, t in enumerate(self.decoder)}

    class _Unpadded(TextTokenizer):
        def encode(self, text: str) -> EncodedText:
            e = super().encode(text)
            return EncodedText(ids=e.ids[: max(e.length, 1)], length=e.length, position_map=e.position_map)

    g2p = hama.G2PModel()
    vocab = _Vocab(encoder=g2p.vocab.encoder, decoder=g2p.vocab.decoder)
    g2p.vocab = vocab
    g2p.tokenizer = _Unpadded(vocab, g2p.tokenizer.max_input_len)
    return g2p


def g2p_pronunciations(words: Sequence[str], progress: bool = True) -> dict[str, list[str]]:
    """Phones of each word by hama's G2P (~5-20 ms a word on one core), with a tqdm progress bar.

    Apostrophes are dropped before G2P (``john's`` is spelled as ``johns``: hama reads an apostrophe
    as a vowel). A word G2P cannot spell in the recogniser's phones gets no entry.
    """
    symbols = set(hama_phone_symbols()) - NON_PHONES
    g2p = _fast_g2p()
    out: dict[str, list[str]] = {}
    it: Iterable[str] = words
    if progress and words:
        from tqdm import tqdm

        it = tqdm(words, desc="hama G2P", unit="word", mininterval=1.0)
    for w in it:
        text = w.replace("'", "") or w
        phones = [a.phoneme for a in g2p.predict(text).alignments]
        phones = [p for p in phones if p in symbols]
        if phones:
            out[w] = phones
    return out


def read_phone_lexicon(path: str | os.PathLike, symbols: Sequence[str] | None = None) -> dict[str, list[str]]:
    """``word phone ...`` lines (plain or ``.gz``) -> ``{word: phones}``; the first entry of a word wins.

    Raises:
        FileFormatError: a line has no phone, or (with ``symbols``) a phone outside ``symbols``.
    """
    p = Path(path)
    known = set(symbols) if symbols is not None else None
    opener = gzip.open if p.suffix == ".gz" else open
    lex: dict[str, list[str]] = {}
    try:
        with opener(p, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                fields = line.split()
                if not fields:
                    continue
                if len(fields) < 2:
                    raise FileFormatError(p, n, f"expected 'word phone ...', got {line.strip()!r}")
                if known is not None:
                    bad = [x for x in fields[1:] if x not in known]
                    if bad:
                        raise FileFormatError(p, n, f"phones {bad} are not symbols of hama's recogniser")
                lex.setdefault(fields[0], fields[1:])
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise FileFormatError(p, None, f"cannot read the lexicon ({err})") from None
    return lex


def write_phone_lexicon(lexicon: Mapping[str, Sequence[str]], path: str | os.PathLike) -> Path:
    """Write ``word phone ...`` lines (gzip when ``path`` ends in ``.gz``) atomically; return the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(w + " " + " ".join(ph) + "\n" for w, ph in lexicon.items())
    data = gzip.compress(text.encode("utf-8"), mtime=0) if p.suffix == ".gz" else text.encode("utf-8")
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p
