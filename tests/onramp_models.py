"""Foreign model directories built for the tests: a tiny random Hugging Face ``Wav2Vec2ForCTC``
(``save_pretrained`` layout, built from a config: no hub) and demo-rnnt / demo-tdt exported to the
sherpa-onnx layout. Each is built once per process (``cached_*``), in a temporary folder."""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

#: the tiny model's vocabulary: HF's wav2vec2 conventions (pad = blank, | = word delimiter)
HF_VOCAB = ["<pad>", "<s>", "</s>", "<unk>", "|", *"ABCDEFGH'"]

_CACHE: dict[str, Path] = {}


def build_hf_ctc(out: Path, seed: int = 0, norm: str = "layer") -> Path:
    """Save a randomly initialised 1-layer Wav2Vec2ForCTC (+ processor) to ``out``; ``norm="group"``:
    wav2vec2-base's feature encoder, whose processor returns no attention mask."""
    import torch
    from transformers import (Wav2Vec2Config, Wav2Vec2CTCTokenizer, Wav2Vec2FeatureExtractor, Wav2Vec2ForCTC,
                              Wav2Vec2Processor)

    out.mkdir(parents=True, exist_ok=True)
    (out / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(HF_VOCAB)}), encoding="utf-8")
    tok = Wav2Vec2CTCTokenizer(str(out / "vocab.json"), word_delimiter_token="|")
    fe = Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                                  return_attention_mask=norm == "layer")
    cfg = Wav2Vec2Config(vocab_size=len(HF_VOCAB), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32, conv_dim=(8,) * 7, num_conv_pos_embeddings=16,
                         num_conv_pos_embedding_groups=2, feat_extract_norm=norm, do_stable_layer_norm=norm == "layer",
                         pad_token_id=0)
    torch.manual_seed(seed)
    model = Wav2Vec2ForCTC(cfg).eval()
    with torch.no_grad():  # make labels win on some frames, so transcripts are not empty
        model.lm_head.bias[0] -= 1.0
    model.save_pretrained(str(out))
    Wav2Vec2Processor(feature_extractor=fe, tokenizer=tok).save_pretrained(str(out))
    return out


def _scratch(prefix: str) -> Path:
    """A temporary folder removed when the test process exits (the models are shared by many tests)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path


def cached_hf_ctc(norm: str = "layer") -> Path:
    key = f"hf-{norm}"
    if key not in _CACHE:
        _CACHE[key] = build_hf_ctc(_scratch("asrdecode-hf-") / f"tiny-wav2vec2-{norm}", norm=norm)
    return _CACHE[key]


def cached_onnx(name: str = "demo-rnnt") -> Path:
    """``name`` exported with :func:`asrdecode.models.onnx_export.export_onnx` (once per process)."""
    if name not in _CACHE:
        from asrdecode.models import load
        from asrdecode.models.onnx_export import export_onnx

        out = _scratch("asrdecode-onnx-") / name
        export_onnx(load(name), out)
        _CACHE[name] = out
    return _CACHE[name]
