"""Hostile inputs (issue 30): every case gives a result or a named error, never a crash, a hang,
foreign code run, or a silent wrong answer. Each test has a timeout: a hang fails it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


# -- Hugging Face model folders: foreign code and vocabularies ---------------------------------------

_EVIL = '''
from pathlib import Path
Path({marker!r}).write_text("ran")
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC
class EvilConfig(Wav2Vec2Config):
    model_type = "evil"
class EvilForCTC(Wav2Vec2ForCTC):
    config_class = EvilConfig
'''


@pytest.fixture()
def hf_copy(tmp_path):
    pytest.importorskip("transformers")
    from onramp_models import cached_hf_ctc

    out = tmp_path / "model"
    shutil.copytree(cached_hf_ctc(), out)
    return out


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def _plant_remote_code(folder: Path, marker: Path) -> None:
    (folder / "evil.py").write_text(_EVIL.format(marker=str(marker)), encoding="utf-8")
    _edit_json(folder / "config.json", model_type="evil",
               auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForCTC": "evil.EvilForCTC"})


def test_auto_map_folder_is_refused_and_its_code_never_runs(hf_copy, tmp_path) -> None:
    from asrdecode.models import load_bundle
    from asrdecode.models.hf_ctc import RemoteCodeError

    marker = tmp_path / "marker"
    _plant_remote_code(hf_copy, marker)
    with pytest.raises(RemoteCodeError, match="auto_map"):
        load_bundle(str(hf_copy))
    assert not marker.exists()


def test_transformers_is_told_not_to_trust_remote_code(hf_copy, tmp_path, monkeypatch) -> None:
    """Even past the folder check, transformers gets trust_remote_code=False: an error, no prompt, no code."""
    from asrdecode.errors import FileFormatError
    from asrdecode.models import hf_ctc

    marker = tmp_path / "marker"
    _plant_remote_code(hf_copy, marker)
    monkeypatch.setattr(hf_ctc, "_refuse_remote_code", lambda path: None)
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers prompted"))
    with pytest.raises(FileFormatError):
        hf_ctc.load_hf_ctc(str(hf_copy))
    assert not marker.exists()


@pytest.mark.parametrize("vocab, match", [
    ({}, "empty"),
    ({"<pad>": 0, "A": 1, "B": 1}, "share the id"),
    ({"<pad>": "0", "A": "1"}, "expected an integer"),
    ({"<pad>": 0, "A": 1.5}, "expected an integer"),
])
def test_bad_hf_vocabularies_are_named_errors(hf_copy, vocab, match) -> None:
    from asrdecode.errors import FileFormatError
    from asrdecode.models import load_bundle

    (hf_copy / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    with pytest.raises(FileFormatError, match=match):
        load_bundle(str(hf_copy))


def test_a_vocabulary_of_specials_only_is_refused(hf_copy) -> None:
    from asrdecode.errors import FileFormatError
    from asrdecode.models import load_bundle

    (hf_copy / "vocab.json").write_text(json.dumps({"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3, "|": 4}),
                                        encoding="utf-8")
    with pytest.raises(FileFormatError, match="spells text"):
        load_bundle(str(hf_copy))
