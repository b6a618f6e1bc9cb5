"""Hugging Face ``transformers`` CTC models (``Wav2Vec2ForCTC`` and siblings) as a ``ModelBundle``.

A ``save_pretrained`` directory (``config.json``, the weights, and the processor's feature
extractor (``processor_config.json`` or, from transformers 4, ``preprocessor_config.json``) and
tokenizer (``vocab.json``)) loads with ``load_bundle(PATH)`` / ``--model PATH``; a
``Wav2Vec2ProcessorWithLM``'s ``language_model/`` is not used (pass its ARPA as ``--word-lm``). The pieces map onto the bundle protocol as:

- ``features``: the processor's feature extractor (per-utterance normalisation when the model
  asks for it), raw samples ``[B, N, 1]`` (``F = 1``, one feature frame per sample);
- ``encode_features``: the model's base network (``model.base_model``) -> hidden states
  ``[B, T, D]`` (20 ms frames for wav2vec2), lengths from the model's own convolution arithmetic;
- the CTC head: ``lm_head`` + log-softmax -> ``[B, T, V]`` (``model(...).logits`` exactly);
- the tokenizer: the processor's vocabulary as a :class:`~asrdecode.models.vocabulary.PieceTokenizer`
  (blank = the pad token, ``|`` the word delimiter, ``<s>`` / ``</s>`` / ``<unk>`` spell nothing).

Only models fed raw samples (``input_values``: wav2vec2, HuBERT, WavLM, data2vec-audio, SEW,
UniSpeech, ...) are supported; ``transformers`` is the optional ``hf`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch

from ..errors import DecodingInputError, FileFormatError, RemoteCodeError, check_metadata_number
from .vocabulary import PieceTokenizer

__all__ = ["HFCTCBundle", "HFCTCHead", "is_hf_ctc_dir", "load_hf_ctc", "HFMissingError", "RemoteCodeError"]

SAMPLE_RATE = 16000
#: the JSON files of a model folder that can name Python code to import (``auto_map``)
_CODE_CONFIGS = ("config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json",
                 "feature_extractor_config.json")


#: config.json sizes checked before transformers builds the model (a header's 1e12 is no allocation):
#: key -> largest accepted value (each entry of a list, lists of at most 64 entries)
_SIZE_LIMITS = {"hidden_size": 65_536, "intermediate_size": 262_144, "num_hidden_layers": 1_024,
                "num_attention_heads": 1_024, "vocab_size": 1_000_000, "conv_dim": 65_536, "conv_kernel": 4_096,
                "conv_stride": 1_024, "num_conv_pos_embeddings": 4_096, "num_conv_pos_embedding_groups": 1_024,
                "num_feat_extract_layers": 64, "num_adapter_layers": 64, "adapter_stride": 1_024,
                "output_hidden_size": 65_536}


class HFMissingError(DecodingInputError):
    """``transformers`` is not installed."""


def is_hf_ctc_dir(spec: str) -> bool:
    """Whether ``spec`` is a directory that looks like a ``save_pretrained`` model (has ``config.json``)."""
    p = Path(spec)
    return p.is_dir() and (p / "config.json").is_file()


def _import_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise HFMissingError("Hugging Face models need `pip install -e '.[hf]'` in the asrdecode checkout (transformers)") from None
    return transformers


class HFCTCHead(torch.nn.Module):
    """The model's CTC output layer: hidden states ``[B, T, D]`` -> log-probs ``[B, T, V]``."""

    def __init__(self, lm_head: torch.nn.Linear, blank_id: int) -> None:
        super().__init__()
        self.lm_head = lm_head
        self.blank_id = int(blank_id)
        self.vocab_size = int(lm_head.out_features)

    @torch.no_grad()
    def log_probs_from_encoder(self, enc: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.lm_head(enc).float(), dim=-1)


class HFCTCBundle:
    """A loaded ``transformers`` CTC model (see the module docstring); ``kind == "ctc"``.

    Args:
        name: what outputs and errors call it (the directory).
        model: a ``*ForCTC`` model (``base_model``, ``lm_head``, ``_get_feat_extract_output_lengths``).
        feature_extractor: its processor's feature extractor (``input_values``, 16 kHz).
        tokenizer: the vocabulary as a :class:`PieceTokenizer`.
    """

    kind = "ctc"
    feature_dim = 1

    def __init__(self, name: str, model: Any, feature_extractor: Any, tokenizer: PieceTokenizer) -> None:
        self.name = name
        self.net = model.eval()
        self.feature_extractor = feature_extractor
        self.tokenizer = tokenizer
        self.blank_id = tokenizer.blank_id
        self.model = HFCTCHead(model.lm_head, self.blank_id)
        cfg = model.config
        stride = int(np.prod(getattr(cfg, "conv_stride", [1])))
        if getattr(cfg, "add_adapter", False):  # the adapter's strided convolutions (as the model's output lengths)
            stride *= int(cfg.adapter_stride) ** int(cfg.num_adapter_layers)
        self.feature_frames_per_frame = stride
        self.frame_seconds = stride / SAMPLE_RATE
        self.encoder_dim = int(model.lm_head.in_features)
        self._mask = bool(getattr(feature_extractor, "return_attention_mask", False))

    def features(self, audio: Any, lengths: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """A list of 16 kHz waveforms ``[N]`` -> the extractor's samples ``[B, N, 1]`` + lengths ``[B]``."""
        from .demo import as_wave_list

        waves = [w.numpy() for w in as_wave_list(audio, lengths)]
        flen = torch.tensor([w.shape[0] for w in waves], dtype=torch.long)
        # an empty waveform has no mean / variance to normalise with: one zero sample stands in (0 frames anyway)
        waves = [w if w.shape[0] else np.zeros(1, dtype=np.float32) for w in waves]
        out = self.feature_extractor(waves, sampling_rate=SAMPLE_RATE, padding=True, return_tensors="np",
                                     return_attention_mask=True)
        x = torch.from_numpy(np.asarray(out["input_values"], dtype=np.float32))
        return x.unsqueeze(2), flen

    @torch.no_grad()
    def encode_features(self, feats: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples ``[B, N, 1]`` + lengths -> hidden states ``[B, T, D]`` + frame counts ``[B]``.

        Inputs shorter than the convolutions' receptive field are zero-padded to it (their
        frame count stays what the model's arithmetic gives, possibly 0). Models that take no
        attention mask encode a padded batch one utterance at a time (see :meth:`_one_at_a_time`).
        """
        if not isinstance(feats, torch.Tensor) or feats.dim() != 3 or feats.shape[2] != 1:
            raise DecodingInputError("feats must be a float tensor [B, N, 1] (samples)")
        dev = self.model.lm_head.weight.device
        x = feats[:, :, 0].float().to(dev)
        lengths = lengths.long().to(dev).clamp(max=x.shape[1])
        field = self._receptive_field()
        if x.shape[1] < field:
            x = torch.nn.functional.pad(x, (0, field - x.shape[1]))
        if self._mask:
            # at least one receptive field unmasked (a shorter utterance gets 0 frames below, whatever it holds)
            mask = (torch.arange(x.shape[1], device=dev).unsqueeze(0) < lengths.clamp(min=field).unsqueeze(1)).long()
            hidden = self.net.base_model(x, attention_mask=mask).last_hidden_state
        elif x.shape[0] > 1 and bool((lengths < x.shape[1]).any()):
            hidden = self._one_at_a_time(x, lengths, field)
        else:
            hidden = self.net.base_model(x).last_hidden_state
        out_len = self.net._get_feat_extract_output_lengths(lengths).long().clamp(min=0, max=hidden.shape[1])
        return hidden, out_len

    def _one_at_a_time(self, x: torch.Tensor, lengths: torch.Tensor, field: int) -> torch.Tensor:
        """Models without an attention mask (group-norm feature encoders: wav2vec2-base) see the
        padding, so each utterance is encoded alone, unpadded: the output does not depend on the batch."""
        outs = [self.net.base_model(x[i : i + 1, : max(int(n), field)]).last_hidden_state[0]
                for i, n in enumerate(lengths.tolist())]
        hidden = x.new_zeros(x.shape[0], max(o.shape[0] for o in outs), outs[0].shape[-1])
        for i, o in enumerate(outs):
            hidden[i, : o.shape[0]] = o
        return hidden

    def _receptive_field(self) -> int:
        cfg = self.net.config
        field = 1
        for k, s in zip(reversed(list(cfg.conv_kernel)), reversed(list(cfg.conv_stride))):
            field = (field - 1) * s + k
        return field


def _from_pretrained(transformers: Any, auto: Any, path: Path, what: str) -> Any:
    """``auto.from_pretrained(path)`` offline and quietly; any failure -> :class:`FileFormatError` naming ``what``."""
    verbosity = transformers.logging.get_verbosity()
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    try:
        # trust_remote_code=False: a folder's own Python is never imported, and transformers never prompts
        return auto.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as err:  # transformers raises OSError, ValueError, TypeError, ... for damaged directories
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise FileFormatError(path, None, f"cannot load {what}: {first}") from None
    finally:
        transformers.logging.set_verbosity(verbosity)
        if bars:
            transformers.logging.enable_progress_bar()


def _read_json(f: Path, what: str) -> Any:
    """The JSON value of file ``f``, or :class:`FileFormatError` naming ``f`` and ``what`` it should be
    (unreadable, not JSON, or nested too deep for the parser: 100k brackets raised RecursionError)."""
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except RecursionError:
        raise FileFormatError(f, None, f"not a readable {what} (nested too deeply)") from None
    except (OSError, ValueError) as err:
        raise FileFormatError(f, None, f"not a readable {what} ({err})") from None


def _refuse_remote_code(path: Path) -> None:
    """Raise :class:`RemoteCodeError` when a config file of ``path`` names code to import (``auto_map``)."""
    for name in _CODE_CONFIGS:
        f = path / name
        if not f.is_file():
            continue
        data = _read_json(f, "JSON file")
        if isinstance(data, dict):
            for key in ("auto_map", "custom_pipelines"):
                if key in data:
                    raise RemoteCodeError(f, None, f"has {key!r}: the folder asks to run its own Python code, "
                                                   "which asrdecode never does (trust_remote_code=False)")


def _check_sizes(path: Path, config: dict) -> None:
    """The model sizes of ``config.json`` are integers in sane ranges (:data:`_SIZE_LIMITS`)."""
    for key, hi in _SIZE_LIMITS.items():
        if key not in config:
            continue
        value = config[key]
        values = value if isinstance(value, list) else [value]
        if isinstance(value, list) and not 1 <= len(value) <= 64:
            raise FileFormatError(path / "config.json", None, f"metadata {key} must list 1..64 sizes, got {len(value)}")
        for v in values:
            check_metadata_number(path / "config.json", key, v, 1, hi)


def _check_vocab_file(path: Path) -> None:
    """``vocab.json`` (when present, a flat token -> id map) has integer ids, each once."""
    f = path / "vocab.json"
    if not f.is_file():
        return
    data = _read_json(f, "JSON vocabulary")
    if not isinstance(data, dict):
        raise FileFormatError(f, None, f"expected a JSON object token -> id, got {type(data).__name__}")
    if data and all(isinstance(v, dict) for v in data.values()):  # multilingual: language -> vocabulary
        return
    _check_ids(f, data)


def _check_ids(where: Path, vocab: dict) -> None:
    if not vocab:
        raise FileFormatError(where, None, "the vocabulary is empty")
    seen: dict[int, str] = {}
    for piece, i in vocab.items():
        if isinstance(i, bool) or not isinstance(i, int):
            raise FileFormatError(where, None, f"vocabulary token {piece!r} has id {i!r}, expected an integer")
        if i in seen:
            raise FileFormatError(where, None, f"vocabulary tokens {seen[i]!r} and {piece!r} share the id {i}")
        seen[i] = piece


def _hf_tokenizer(path: Path, tok: Any, vocab_size: int, pad_id: Optional[int]) -> PieceTokenizer:
    if not hasattr(tok, "get_vocab"):
        raise FileFormatError(path, None, f"the tokenizer ({type(tok).__name__}) has no vocabulary")
    vocab = tok.get_vocab()
    if not isinstance(vocab, dict):
        raise FileFormatError(path, None, f"the tokenizer's vocabulary is a {type(vocab).__name__}, expected a dict")
    _check_ids(path, vocab)
    pieces: list[Optional[str]] = [None] * vocab_size
    for piece, i in vocab.items():
        if not 0 <= int(i) < vocab_size:
            raise FileFormatError(path, None, f"vocabulary token {piece!r} has id {i} but the model has {vocab_size} outputs")
        pieces[int(i)] = piece
    blank = pad_id if pad_id is not None else getattr(tok, "pad_token_id", None)
    if blank is None or not 0 <= int(blank) < vocab_size:
        raise FileFormatError(path, None, f"no blank: expected config.pad_token_id or the tokenizer's pad token in "
                                          f"0..{vocab_size - 1}, got {blank!r}")
    delimiter = getattr(tok, "word_delimiter_token", None)
    if delimiter not in vocab:
        delimiter = None
    specials = [s for s in getattr(tok, "all_special_tokens", []) if s != delimiter]
    spelling = [p for i, p in enumerate(pieces) if p and i != int(blank) and p not in specials and p != delimiter]
    if not spelling:
        raise FileFormatError(path, None, "the vocabulary has no token that spells text (only blank, delimiter "
                                          "and special tokens): every transcript would be empty")
    return PieceTokenizer(pieces, int(blank), delimiter=delimiter, specials=specials)


def load_hf_ctc(spec: str, device: torch.device | str = "cpu") -> HFCTCBundle:
    """A ``save_pretrained`` CTC model directory -> :class:`HFCTCBundle` (on ``device``).

    Model folders are not trusted: a config naming Python code to run (``auto_map``) raises
    :class:`RemoteCodeError` before transformers sees the folder (and every ``from_pretrained``
    passes ``trust_remote_code=False``, so transformers never prompts); a vocabulary that is empty,
    has non-integer or shared ids, or spells nothing raises :class:`FileFormatError`.

    Raises:
        HFMissingError: ``transformers`` is not installed.
        RemoteCodeError: the folder asks to run its own code.
        FileFormatError: the directory is not a CTC model with a raw-sample feature extractor
            and a vocabulary, or its parts disagree.
    """
    path = Path(spec)
    config = _read_json(path / "config.json", "JSON model config")
    archs = config.get("architectures") or []
    if not isinstance(archs, list) or not any(isinstance(a, str) and a.endswith("ForCTC") for a in archs):
        raise FileFormatError(path, None, f"expected a Hugging Face CTC model (architectures ending in 'ForCTC', "
                                          f"e.g. Wav2Vec2ForCTC), got {archs!r}")
    _refuse_remote_code(path)
    _check_sizes(path, config)
    _check_vocab_file(path)
    transformers = _import_transformers()
    # the feature extractor and the tokenizer load on their own (not as one AutoProcessor), so a
    # Wav2Vec2ProcessorWithLM directory loads without pyctcdecode: its language_model/ is not used
    model = _from_pretrained(transformers, transformers.AutoModelForCTC, path, "the model")
    extractor = _from_pretrained(transformers, transformers.AutoFeatureExtractor, path, "the feature extractor "
                                 "(preprocessor_config.json)")
    tok = _from_pretrained(transformers, transformers.AutoTokenizer, path, "the CTC tokenizer (vocab.json, "
                           "tokenizer_config.json; save the processor with processor.save_pretrained(PATH))")
    names = list(getattr(extractor, "model_input_names", []))
    if not names or names[0] != "input_values" or not hasattr(model, "lm_head") \
            or not hasattr(model, "_get_feat_extract_output_lengths"):
        raise FileFormatError(path, None, f"{type(model).__name__}: only CTC models fed raw samples (input_values: "
                                          "wav2vec2, HuBERT, WavLM, data2vec-audio, ...) are supported")
    rate = int(getattr(extractor, "sampling_rate", SAMPLE_RATE))
    if rate != SAMPLE_RATE:
        raise FileFormatError(path, None, f"the feature extractor expects {rate} Hz audio; only {SAMPLE_RATE} Hz is supported")
    tokenizer = _hf_tokenizer(path, tok, int(model.lm_head.out_features), config.get("pad_token_id"))
    model = model.to(device)
    return HFCTCBundle(str(spec), model, extractor, tokenizer)
