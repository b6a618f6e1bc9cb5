"""``phone-ctc``: hama's phone recogniser (trained on real speech) as a CTC :class:`ModelBundle`.

The acoustic model is the phone CTC model of the PyPI package ``hama`` (the optional extra
``asrdecode[hama]``): 16 kHz audio -> log-probs over 191 classes every 20 ms, ``<blank>`` and a
word-boundary class ``<wb>`` among them. Its "features" are those log-probs (``F = 191``, one per
encoder frame) and the encoder and CTC head are the identity, so block-wise streaming
(:class:`~asrdecode.streaming.BlockFrontEnd`) runs hama on each audio window.

Words come from WFST decoding (the bundle's ``decode_defaults``): a TLG graph of the bundled word
3-gram pruned to the ``words`` most likely words, spelled by the shipped hama-G2P lexicon
(:mod:`.phone_lexicon`), each word with two pronunciations, its phones and its phones + ``<wb>``
(``benchmarks/results_wfst_phone.md``: better than folding ``<wb>`` into the blank). The graph is
built on first use and cached per input (:mod:`.graph_cache`). The CTC prefix beam search gives
words too, with the lexicon-constrained word LM over the phone lexicon (:mod:`.phone_words`,
:meth:`PhoneCTCBundle.beam_defaults`); plain greedy decoding gives phones.

Shapes: ``B`` batch, ``T`` 20 ms frames, ``V = 191``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError
from .phone_lexicon import NON_PHONES, SHIPPED_LEXICON, g2p_pronunciations, hama_phone_symbols, read_phone_lexicon, \
    require_hama
from .phone_words import BEAM, BETA, LM_WEIGHT, WORD_BONUS

__all__ = ["PhoneCTCBundle", "PhoneTokenizer", "PhoneCTCHead", "load_phone_ctc", "build_phone_graph",
           "phone_graph", "parse_phone_spec", "default_words", "DEFAULT_WORDS", "WORD_LM", "PHONE_CTC"]

PHONE_CTC = "phone-ctc"
#: the bundled word 3-gram (52k words)
WORD_LM = Path(__file__).parent / "assets" / "word-3gram.arpa.gz"
#: graph vocabulary of ``phone-ctc`` (``phone-ctc:words=N`` / ``:words=all`` or ``$ASRDECODE_PHONE_WORDS`` choose another)
DEFAULT_WORDS: Optional[int] = None
#: WFST decoding tuned on data/real + data/synth_test (recipes/README.md, "phone-ctc"): the acoustic
#: scale and the beam / max-active of benchmarks/wfst_phone.py (as accurate as 17 / 10000 here, 5x faster)
ACOUSTIC_SCALE = 1.2
WFST_BEAM = 12.0
MAX_ACTIVE = 2000
TOPOLOGY = "compact"
_SPECIAL = ("<s>", "</s>", "<unk>")


class PhoneTokenizer:
    """Ids of hama's classes -> text: phones of a word joined, ``<wb>`` a space (``"ðə kæt"``).

    ``id_to_piece`` gives ``"▁"`` for ``<wb>`` (a word boundary for word times), the phone otherwise;
    ``encode`` spells words through ``lexicon`` (phones, ``<wb>`` between words).
    """

    def __init__(self, symbols: Sequence[str], blank_id: int, lexicon: Optional[Mapping[str, Sequence[str]]] = None):
        self.symbols = list(symbols)
        if not 0 <= blank_id < len(self.symbols):
            raise DecodingInputError(f"blank_id {blank_id} outside 0..{len(self.symbols) - 1}")
        self.blank_id = blank_id
        self.wb_id = self.symbols.index("<wb>") if "<wb>" in self.symbols else -1
        self._index = {s: i for i, s in enumerate(self.symbols)}
        self._lexicon = lexicon

    @property
    def vocab_size(self) -> int:
        return len(self.symbols)

    def _check(self, i: int) -> int:
        i = int(i)
        if not 0 <= i < len(self.symbols) or i == self.blank_id:
            raise DecodingInputError(f"token id {i} is not a non-blank symbol of this tokenizer")
        return i

    def id_to_piece(self, i: int) -> str:
        i = self._check(i)
        return "\u2581" if i == self.wb_id else self.symbols[i]

    def decode(self, ids: Sequence[int]) -> str:
        out = []
        for i in ids:
            i = self._check(i)
            s = self.symbols[i]
            out.append(" " if i == self.wb_id else ("" if s in NON_PHONES else s))
        return " ".join("".join(out).split())

    def encode(self, text: str) -> list[int]:
        """Words -> phone ids (``<wb>`` between words) from the lexicon; raises for a word it lacks."""
        ids: list[int] = []
        lex = self._lexicon if self._lexicon is not None else {}
        for k, word in enumerate(text.split()):
            if word not in lex:
                raise DecodingInputError(f"word {word!r} is not in the phone lexicon (boost words of the graph "
                                         "with the default --decoder wfst instead)")
            if k:
                ids.append(self.wb_id)
            ids.extend(self._index[p] for p in lex[word])
        return ids


class PhoneCTCHead:
    """The CTC head of ``phone-ctc``: encoder output is already log-probs ``[B, T, V]`` (returned as float32)."""

    def __init__(self, vocab_size: int, blank_id: int) -> None:
        self.vocab_size = vocab_size
        self.blank_id = blank_id

    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        if not isinstance(enc, torch.Tensor) or enc.dim() != 3 or enc.shape[2] != self.vocab_size:
            raise DecodingInputError(f"enc must be a float tensor [B, T, {self.vocab_size}]")
        return enc.float()


class PhoneCTCBundle:
    """hama's phone CTC model as a :class:`~asrdecode.models.ModelBundle` (see the module docstring).

    Args:
        words: the graph's vocabulary: the ``words`` most likely LM words that the lexicon spells
            (``None``: all of them).
        lm: the word LM (ARPA; default: the bundled 3-gram).
        lexicon: ``word phone ...`` file (default: the shipped hama-G2P lexicon of the bundled LM);
            LM words it lacks are spelled by hama's G2P (with a progress bar) when the graph is built.
        name: the bundle's name in outputs.
    """

    kind = "ctc"
    #: the decoders that give words (the pipeline refuses the others: greedy would give phones)
    word_decoders = ("wfst", "beam")
    frame_seconds = 0.02
    feature_frames_per_frame = 1

    def __init__(self, words: Optional[int] = DEFAULT_WORDS, lm: str | os.PathLike = WORD_LM,
                 lexicon: str | os.PathLike = SHIPPED_LEXICON, name: str = PHONE_CTC,
                 device: str | torch.device = "cpu") -> None:
        require_hama()
        if words is not None and (isinstance(words, bool) or not isinstance(words, int) or words < 1):
            raise DecodingInputError(f"words must be an int >= 1 or None (all LM words), got {words!r}")
        for label, p in (("lm", lm), ("lexicon", lexicon)):
            if not Path(p).is_file():
                raise FileFormatError(p, None, f"no such {label} file")
        self.name = name
        self.words = words
        self.lm = Path(lm)
        self.lexicon_path = Path(lexicon)
        self.device = torch.device(device)
        symbols = hama_phone_symbols()
        self.symbols = symbols
        self.blank_id = symbols.index("<blank>")
        self.wb_id = symbols.index("<wb>")
        self.feature_dim = self.encoder_dim = len(symbols)
        self.model = PhoneCTCHead(len(symbols), self.blank_id)
        self._lexicon: Optional[dict[str, list[str]]] = None
        self.tokenizer = PhoneTokenizer(symbols, self.blank_id, _LazyLexicon(self.phone_lexicon))
        self._front: Any = None
        self._graph: Optional[Path] = None
        self._word_lm: Any = None

    # -- acoustic model ---------------------------------------------------------------------------

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Audio (list of 16 kHz waveforms, one waveform, or ``[B, N]`` + ``lengths``) -> hama's phone
        log-probs ``[B, T, 191]`` and their lengths ``[B]``."""
        from .demo import as_wave_list
        from .frontend import HamaFrontEnd

        waves = as_wave_list(audio, lengths)
        if self._front is None:
            self._front = HamaFrontEnd()
        feats = [self._front.phone_log_probs(w) for w in waves]
        flen = torch.tensor([f.shape[0] for f in feats], dtype=torch.long)
        x = torch.zeros(len(feats), max(1, int(flen.max())), self.feature_dim)
        for i, f in enumerate(feats):
            x[i, : f.shape[0]] = f
        return x.to(self.device), flen.to(self.device)

    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The identity on hama's log-probs ``[B, T, 191]`` (checked) + lengths ``[B]``."""
        if not isinstance(feats, torch.Tensor) or feats.dim() != 3 or feats.shape[2] != self.feature_dim:
            raise DecodingInputError(f"feats must be a float tensor [B, T, {self.feature_dim}]")
        if not isinstance(lengths, torch.Tensor) or lengths.shape != feats.shape[:1]:
            raise DecodingInputError(f"lengths must be a tensor [{feats.shape[0]}]")
        if bool((lengths < 0).any()) or bool((lengths > feats.shape[1]).any()):
            raise DecodingInputError(f"lengths must be in [0, {feats.shape[1]}]")
        return feats.float(), lengths.long()

    # -- words --------------------------------------------------------------------------------------

    def phone_lexicon(self) -> dict[str, list[str]]:
        """``{word: phones}`` of the lexicon file (read once)."""
        if self._lexicon is None:
            self._lexicon = read_phone_lexicon(self.lexicon_path, self.symbols)
        return self._lexicon

    def graph_path(self, log: Optional[Callable[[str], None]] = None) -> Path:
        """The cached TLG graph file of this bundle (built on first use; see :func:`phone_graph`)."""
        if self._graph is None:
            self._graph = phone_graph(self.words, self.lm, self.lexicon_path, log=log).path
        return self._graph

    @property
    def decode_defaults(self) -> dict[str, Any]:
        """WFST decoding with the cached graph and the tuned acoustic scale (builds the graph once)."""
        return {"decoder": "wfst", "graph": str(self.graph_path()), "acoustic_scale": ACOUSTIC_SCALE,
                "wfst_beam": WFST_BEAM, "max_active": MAX_ACTIVE, "beam": BEAM}

    def beam_words(self) -> tuple[list[tuple[Any, float]], Any]:
        """``(fusion, tokenizer)`` with which ``--decoder beam`` gives words (the registry's CTC beam
        builder calls it when no LM is given): :meth:`beam_fusion` and the phone-to-word tokenizer."""
        return self.beam_fusion(), self.word_lm()[1]


    def word_lm(self, log: Optional[Callable[[str], None]] = None) -> tuple[Any, Any]:
        """``(WordNGramLM, PhoneWordTokenizer)``: the lexicon-mode word LM over the pronunciations of the
        LM's words (all of them the lexicon spells; built once and cached) and the tokenizer that turns
        phone ids back into words."""
        if self._word_lm is None:
            from .phone_words import phone_word_lm

            self._word_lm = phone_word_lm(self.symbols, self.blank_id, self.lm, self.lexicon_path, log=log)
        return self._word_lm

    def beam_fusion(self, weight: float = LM_WEIGHT, word_bonus: float = WORD_BONUS) -> list[tuple[Any, float]]:
        """The ``fusion=`` list of :func:`asrdecode.ctc.beam_search` that makes its hypotheses words:
        the lexicon-mode word LM at ``weight``, ``word_bonus`` per word on the fused scale."""
        lm, _ = self.word_lm()
        return [lm.weighted(weight, word_bonus=word_bonus)]

    @property
    def beam_defaults(self) -> dict[str, Any]:
        """Arguments of :func:`asrdecode.ctc.beam_search` for words from the beam search (``beam``,
        ``fusion``, ``beta``, ``tokenizer``: a :class:`~.phone_words.PhoneWordTokenizer`, whose
        ``decode`` gives the words and ``word_times(tokens, timestamps)`` their frames)."""
        _, tokenizer = self.word_lm()
        return {"beam": BEAM, "fusion": self.beam_fusion(), "beta": BETA, "tokenizer": tokenizer}


class _LazyLexicon(Mapping):
    """A mapping read on first access (the tokenizer's lexicon, needed only to encode words)."""

    def __init__(self, load: Callable[[], Mapping[str, Sequence[str]]]) -> None:
        self._load = load

    def __getitem__(self, key: str) -> Sequence[str]:
        return self._load()[key]

    def __iter__(self):
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __contains__(self, key: object) -> bool:
        return key in self._load()


def spellable_lm(model: Any, words: Optional[int], spellable: set[str]) -> Any:
    """The ``words`` most likely words of ``model`` (by unigram) among ``spellable``, and the n-grams
    over them only (backoff weights kept as they are); ``None``: every spellable word."""
    from ..lm.arpa import drop_words

    real = [i for i, w in enumerate(model.vocab) if w not in _SPECIAL and w in spellable]
    keep = set(real) if words is None else {real[k] for k in np.argsort(-model.logprob[0][real], kind="stable")[:words]}
    return drop_words(model, [w for i, w in enumerate(model.vocab) if w not in ("<s>", "</s>") and i not in keep])


def build_phone_graph(words: Optional[int], lm: str | os.PathLike, lexicon: str | os.PathLike,
                      topology: str = TOPOLOGY) -> Any:
    """The TLG :class:`~asrdecode.ctc.wfst.DecodingGraph` of hama's classes for the ``words`` most likely
    words of ``lm`` (``None``: all); pronunciations from ``lexicon``, else hama's G2P (progress bar).
    The decoder's search index (default dense settings) is attached, so the cached file has it."""
    from ..ctc.wfst import attach_search_index, build_tlg
    from ..lm.arpa import read_arpa

    symbols = hama_phone_symbols()
    model = read_arpa(lm)
    lex = read_phone_lexicon(lexicon, symbols)
    ranked = [model.vocab[i] for i in np.argsort(-model.logprob[0], kind="stable") if model.vocab[i] not in _SPECIAL]
    wanted = ranked if words is None else ranked[: words + max(50, words // 10)]
    missing = [w for w in wanted if w not in lex]
    if missing:
        lex.update(g2p_pronunciations(missing))
    model = spellable_lm(model, words, set(lex))
    index = {s: i for i, s in enumerate(symbols)}
    blank, wb = index["<blank>"], index["<wb>"]
    prons = {}
    for w in model.vocab:
        if w in _SPECIAL:
            continue
        ids = [index[p] for p in lex[w]]
        prons[w] = [ids, ids + [wb]]
    return attach_search_index(build_tlg(list(symbols), prons, model, topology, blank_id=blank))


def _hama_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hama")
    except PackageNotFoundError:  # pragma: no cover - hama imported from a source tree
        return "unknown"


def phone_graph(words: Optional[int], lm: str | os.PathLike = WORD_LM, lexicon: str | os.PathLike = SHIPPED_LEXICON,
                topology: str = TOPOLOGY, log: Optional[Callable[[str], None]] = None) -> Any:
    """The cached graph of :func:`build_phone_graph` (a :class:`~asrdecode.models.graph_cache.CacheEntry`).

    Keyed by the LM's and the lexicon's bytes (SHA-256), ``words``, the topology, the ``<wb>`` rule,
    the recogniser's symbols, hama's version (its G2P spells words the lexicon lacks) and the graph
    file format with its attached search index and recorded pronunciations (word times).
    """
    from ..ctc.wfst.graph import FORMAT
    from .graph_cache import cached_file, file_digest

    inputs = {"graph_format": FORMAT, "search_index": "dense 64 / 512 MB", "model": "hama-phone-ctc",
              "hama": _hama_version(), "symbols": list(hama_phone_symbols()),
              "lm": file_digest(lm), "lexicon": file_digest(lexicon), "words": words, "topology": topology,
              "wb": "optional-last-phone", "pronunciations": "recorded"}
    tag = f"phone-tlg-{'all' if words is None else words}"
    what = f"the phone-ctc decoding graph ({'all' if words is None else words} words)"
    return cached_file(tag, inputs, lambda p: build_phone_graph(words, lm, lexicon, topology).save(p), what=what,
                       log=log)


def _words_value(value: str, where: str) -> Optional[int]:
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 1:
        raise DecodingInputError(f"{where}: words must be a positive integer or 'all', got {value!r}")
    return int(value)


def default_words() -> Optional[int]:
    """The graph vocabulary of plain ``phone-ctc``: ``$ASRDECODE_PHONE_WORDS`` (N or ``all``), else
    :data:`DEFAULT_WORDS`."""
    env = os.environ.get("ASRDECODE_PHONE_WORDS")
    return DEFAULT_WORDS if not env else _words_value(env.strip(), "ASRDECODE_PHONE_WORDS")


def parse_phone_spec(spec: str) -> Optional[int] | bool:
    """``phone-ctc`` -> :func:`default_words`; ``phone-ctc:words=N`` -> N; ``phone-ctc:words=all`` -> None;
    anything else -> ``False`` (not a phone-ctc spec)."""
    if spec == PHONE_CTC:
        return default_words()
    prefix = PHONE_CTC + ":words="
    if not spec.startswith(prefix):
        return False
    return _words_value(spec[len(prefix):], f"model {spec!r}")


def load_phone_ctc(spec: str = PHONE_CTC, device: str | torch.device = "cpu") -> PhoneCTCBundle:
    """The bundle of a ``phone-ctc[:words=N|all]`` model argument."""
    words = parse_phone_spec(spec)
    if words is False:
        raise DecodingInputError(f"model {spec!r}: expected {PHONE_CTC} or {PHONE_CTC}:words=N|all")
    return PhoneCTCBundle(words=words, name=spec, device=device)
