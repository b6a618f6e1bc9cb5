"""A graph file of the per-user cache is validated in full once; later loads of the very file the cache has
just checked (CRC-32 of every byte) skip the validation its record says these bytes passed. Anything else is
validated: a file replaced after the check, another rules fingerprint, a file outside the cache."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("kaldifst")

from asrdecode.ctc.wfst import DecodingGraph, attach_search_index, build_tlg, graph as graph_mod, load_graph  # noqa: E402
from asrdecode.errors import DecodingInputError, FileFormatError  # noqa: E402
from asrdecode.models import graph_cache as gc  # noqa: E402
from test_ctc_wfst import BLANK, LEXICON, V, _lm  # noqa: E402


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """``get()``: the cache entry of a small TLG (built once); ``validations``: graphs validated so far."""
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    graph = attach_search_index(build_tlg(V, LEXICON, _lm(), topology="compact", blank_id=BLANK), dense_min_degree=1)
    validations: list[int] = []
    real = DecodingGraph.validate
    monkeypatch.setattr(DecodingGraph, "validate", lambda self: validations.append(1) or real(self))

    def get() -> gc.CacheEntry:
        return gc.cached_file("tlg", {"v": 1}, graph.save, log=lambda _: None)

    return get, graph, validations


def _record(entry: gc.CacheEntry) -> dict:
    return json.loads(entry.path.with_suffix(".json").read_text())


def _same_graph(a: DecodingGraph, b: DecodingGraph) -> None:
    assert a.words == b.words and a.start == b.start
    for name, t in a._fields().items():
        if isinstance(t, torch.Tensor):
            assert torch.equal(t, getattr(b, name)), name


def test_validated_once_then_trusted(cached):
    get, graph, validations = cached
    entry = get()
    assert "validated_by" not in entry.info
    first = load_graph(entry.path)
    assert len(validations) == 1 and _record(entry)["validated_by"] == graph_mod.validation_fingerprint()
    again = load_graph(get().path)  # a new use: the cache checks the bytes, the loader trusts them
    assert len(validations) == 1
    _same_graph(again, first)
    _same_graph(again, graph)
    again.ensure_valid()  # marked valid: nothing validated
    assert len(validations) == 1
    again.e_score.mul_(2.0)  # changed in place since: validated again before an engine reads it, and refused
    with pytest.raises(DecodingInputError, match="arc_rows differ"):  # (its search index no longer fits)
        again.ensure_valid()
    assert len(validations) == 2


def test_a_file_replaced_after_the_check_is_validated(cached, tmp_path):
    get, graph, validations = cached
    entry = get()
    load_graph(entry.path)
    get()  # checked and vouched for ...
    other = tmp_path / "other.pt"
    graph.save(other)
    os.replace(other, entry.path)  # ... then replaced by another file (a new inode)
    load_graph(entry.path)
    assert len(validations) == 2


def test_another_rules_fingerprint_is_validated_and_recorded(cached, monkeypatch):
    get, graph, validations = cached
    load_graph(get().path)
    monkeypatch.setattr(graph_mod, "validation_fingerprint", lambda: "other-rules")
    entry = get()
    load_graph(entry.path)
    assert len(validations) == 2 and _record(entry)["validated_by"] == "other-rules"
    load_graph(get().path)
    assert len(validations) == 2


def test_files_outside_the_cache_are_always_validated(cached, tmp_path):
    get, graph, validations = cached
    path = tmp_path / "g.pt"
    graph.save(path)
    load_graph(path)
    load_graph(path)
    assert len(validations) == 2


def test_a_record_cannot_vouch_for_altered_bytes(cached):
    """A record claiming validation does not help a file altered after it was built: its CRC-32 fails, the
    entry is rebuilt, and the new file is validated on its first load."""
    get, graph, validations = cached
    entry = get()
    load_graph(entry.path)
    data = bytearray(entry.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.path.write_bytes(bytes(data))
    rebuilt = get()
    assert rebuilt.built and "validated_by" not in rebuilt.info
    _same_graph(load_graph(rebuilt.path), graph)
    assert len(validations) == 2


def test_a_vouched_file_that_is_not_a_graph_is_still_refused(tmp_path, monkeypatch):
    """Vouching skips the validation, not the file's format checks."""
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    entry = gc.cached_file("junk", {"v": 1}, lambda p: torch.save({"format": "nope"}, p), log=lambda _: None)
    entry = gc.cached_file("junk", {"v": 1}, lambda p: pytest.fail("rebuilt"), log=lambda _: None)
    with pytest.raises(FileFormatError, match="not a decoding graph file"):
        load_graph(entry.path)


def test_a_record_changed_since_the_check_is_left_alone(cached):
    """A full validation is written only into the record the cache checked: one rewritten since (another
    process rebuilt or re-checked the entry) is not edited."""
    get, graph, validations = cached
    entry = get()
    record = entry.path.with_suffix(".json")
    changed = {**_record(entry), "crc32": 12345}
    record.write_text(json.dumps(changed))
    load_graph(entry.path)
    assert len(validations) == 1 and json.loads(record.read_text()) == changed


def test_no_fingerprint_means_no_trust(cached, monkeypatch):
    """Where the validation code's source cannot be read (a frozen install), every load validates."""
    get, graph, validations = cached
    monkeypatch.setattr(graph_mod, "validation_fingerprint", lambda: "")
    load_graph(get().path)
    load_graph(get().path)
    assert len(validations) == 2 and "validated_by" not in _record(get())
