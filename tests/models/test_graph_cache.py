"""The per-user artefact cache: every use checks the size and the whole file's CRC-32 (a change anywhere,
size and time kept, is caught), an older record is checked by its SHA-256 once, atomic entries, every
unusable entry rebuilt with a message."""

from __future__ import annotations

import json
import os

import pytest

from asrdecode.models import graph_cache as gc

SIZE = 3 * 2**20 + 123  # larger than sample_digest's blocks: sampling would not read it all


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    builds = []

    def build(path):
        builds.append(path)
        path.write_bytes(bytes(range(256)) * (SIZE // 256) + b"x" * (SIZE % 256))

    messages = []

    def get():
        return gc.cached_file("art", {"v": 1}, build, what="the artefact", log=messages.append)

    return get, builds, messages


def _unsampled_offset(path) -> int:
    """An offset no sampled block covers."""
    size, block, blocks = os.path.getsize(path), 1 << 16, 16
    starts = [(size - block) * k // (blocks - 1) for k in range(blocks)]
    return starts[1] + block + 10


def test_entry_reused_after_its_crc32_without_a_sha256(cache, monkeypatch):
    get, builds, messages = cache
    first = get()
    assert first.built and len(builds) == 1 and first.info["sha256"] and first.info["crc32"] == gc.file_crc32(first.path)
    monkeypatch.setattr(gc, "file_digest", lambda *a: pytest.fail("the SHA-256 was computed"))
    crcs = []
    monkeypatch.setattr(gc, "file_crc32", lambda p: crcs.append(p) or _crc(p))
    again = get()
    assert not again.built and again.path == first.path and len(builds) == 1 and crcs == [first.path]


def _crc(path) -> int:
    import zlib

    with open(path, "rb") as f:
        return zlib.crc32(f.read())


def test_touched_file_is_checked_and_kept(cache):
    get, builds, messages = cache
    entry = get()
    st = entry.path.stat()
    os.utime(entry.path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # same bytes, new time (a copy)
    again = get()
    assert not again.built and len(builds) == 1
    record = json.loads(entry.path.with_suffix(".json").read_text(encoding="utf-8"))
    assert record["mtime_ns"] == st.st_mtime_ns + 10**9  # the record took the new time


@pytest.mark.parametrize("where", ["between-sampled-blocks", "last-byte", "zeroed-run"])
def test_any_change_is_caught_with_size_and_time_kept(cache, where):
    get, builds, messages = cache
    entry = get()
    st = entry.path.stat()
    data = bytearray(entry.path.read_bytes())
    if where == "between-sampled-blocks":
        data[_unsampled_offset(entry.path)] ^= 0xFF
    elif where == "last-byte":
        data[-1] ^= 0xFF
    else:
        start = _unsampled_offset(entry.path)
        data[start:start + 4096] = bytes(4096)
    entry.path.write_bytes(bytes(data))
    os.utime(entry.path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert entry.path.stat().st_size == st.st_size
    assert get().built and len(builds) == 2
    assert any("CRC-32" in m and "corrupt" in m and "rebuilding" in m for m in messages)


def test_truncated_missing_or_recordless_entries_are_rebuilt(cache):
    get, builds, messages = cache
    entry = get()
    entry.path.write_bytes(entry.path.read_bytes()[:1000])
    assert get().built and "truncated" in messages[-3]
    entry.path.with_suffix(".json").unlink()  # an artefact without a record: an interrupted build
    assert get().built and "no record" in messages[-3]
    entry.path.unlink()
    assert get().built and "is missing" in messages[-3]
    assert len(builds) == 4


def test_record_without_crc32_is_checked_by_its_sha256_once(cache):
    get, builds, messages = cache
    entry = get()
    record = entry.path.with_suffix(".json")
    info = json.loads(record.read_text(encoding="utf-8"))
    del info["crc32"]
    record.write_text(json.dumps(info), encoding="utf-8")
    assert not get().built and json.loads(record.read_text(encoding="utf-8"))["crc32"] == gc.file_crc32(entry.path)
    info["sha256"] = "0" * 64  # an older record whose file no longer matches
    record.write_text(json.dumps(info), encoding="utf-8")
    assert get().built and len(builds) == 2 and any("SHA-256" in m for m in messages)


def test_sample_digest_of_small_files_is_the_whole_file(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"0123456789" * 1000)
    b.write_bytes(b"0123456789" * 999 + b"0123456780")
    assert gc.sample_digest(a) != gc.sample_digest(b)
    b.write_bytes(b"0123456789" * 1000)
    assert gc.sample_digest(a) == gc.sample_digest(b)


def test_demo_graph_is_cached_keyed_and_rebuilt_when_corrupt(tmp_path, monkeypatch):
    pytest.importorskip("kaldifst")
    from asrdecode import demo as demo_mod
    from asrdecode.models import load

    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(demo_mod, "TLG_WORDS", 40)  # a small graph: about a second to build
    model = load("demo-ctc")
    said: list[str] = []
    g = demo_mod.demo_graph(model, log=said.append)
    assert g is not None and len(g.words) > 30 and any("building" in m for m in said)
    said.clear()
    assert demo_mod.demo_graph(model, log=said.append).words == g.words and said == []
    (path,) = (tmp_path / "cache" / "graphs").glob("demo-tlg-normal-40-*.pt")
    path.write_bytes(path.read_bytes()[:-10] + b"0123456789")  # same size, last block changed
    assert demo_mod.demo_graph(model, log=said.append).words == g.words
    assert any("corrupt" in m and "rebuilding" in m for m in said)


def test_entries_are_keyed_by_inputs_and_a_crashed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "graphs"
    said: list[str] = []

    def good(path):
        path.write_bytes(b"graph" * 1000)

    def crash(path):
        path.write_bytes(b"half a gra")  # killed mid-write
        raise KeyboardInterrupt

    a = gc.cached_file("art", {"words": 4}, good, log=said.append)
    b = gc.cached_file("art", {"words": 5}, good, log=said.append)
    assert a.built and b.built and a.path != b.path  # another input, another entry
    assert not gc.cached_file("art", {"words": 4}, good, log=said.append).built
    with pytest.raises(KeyboardInterrupt):
        gc.cached_file("art", {"words": 6}, crash, log=said.append)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [a.path.name, a.path.with_suffix(".json").name, b.path.name, b.path.with_suffix(".json").name])
    # a corrupt entry whose rebuild crashes: never used afterwards, rebuilt by the next call
    a.path.write_bytes(b"x" * a.path.stat().st_size)
    with pytest.raises(KeyboardInterrupt):
        gc.cached_file("art", {"words": 4}, crash, log=said.append)
    assert any("not usable" in m and "corrupt" in m for m in said)
    assert not list(folder.glob(".*.tmp"))
    said.clear()
    again = gc.cached_file("art", {"words": 4}, good, log=said.append)
    assert again.built and again.path.read_bytes() == b"graph" * 1000
    assert any("no record" in m and "rebuilding" in m for m in said)


def _small_build(path):
    path.write_bytes(b"artefact")


def test_cache_path_faults_are_named_errors(tmp_path, monkeypatch):
    """$ASRDECODE_CACHE a file, its graphs folder a file, a directory where an entry's artefact or record
    belongs, an unwritable folder: CacheError (a FileFormatError) naming the path; nothing deleted."""
    key = gc.input_key({"v": 2})
    spot = tmp_path / "file"
    spot.write_text("not a folder")
    monkeypatch.setenv("ASRDECODE_CACHE", str(spot))
    with pytest.raises(gc.CacheError, match=rf"{spot}: the cache needs a folder here.*ASRDECODE_CACHE must name"):
        gc.cached_file("art", {"v": 2}, _small_build, log=lambda m: None)
    root = tmp_path / "cache"
    monkeypatch.setenv("ASRDECODE_CACHE", str(root))
    root.mkdir()
    (root / "graphs").write_text("not a folder")
    with pytest.raises(gc.CacheError, match="graphs: the cache needs a folder here"):
        gc.cached_file("art", {"v": 2}, _small_build, log=lambda m: None)
    (root / "graphs").unlink()
    for suffix in (".pt", ".json"):
        where = root / "graphs" / f"art-{key}{suffix}"
        where.mkdir(parents=True)
        (where / "mine.txt").write_text("keep")
        with pytest.raises(gc.CacheError, match=rf"art-{key}\{suffix}: the cache keeps a file here"):
            gc.cached_file("art", {"v": 2}, _small_build, log=lambda m: None)
        assert (where / "mine.txt").read_text() == "keep"
        (where / "mine.txt").unlink()
        where.rmdir()
    if os.geteuid() != 0:  # root writes anywhere
        (root / "graphs").chmod(0o500)
        try:
            with pytest.raises(gc.CacheError, match="cannot use the cache folder"):
                gc.cached_file("art", {"v": 2}, _small_build, log=lambda m: None)
        finally:
            (root / "graphs").chmod(0o700)
    entry = gc.cached_file("art", {"v": 2}, _small_build, log=lambda m: None)
    assert entry.built and entry.path.read_bytes() == b"artefact"
    with pytest.raises(OSError, match="not the cache's"):  # the build's own errors pass unchanged

        def failing(path):
            raise FileNotFoundError(2, "not the cache's", str(tmp_path / "elsewhere.arpa"))

        gc.cached_file("art", {"v": 3}, failing, log=lambda m: None)


def test_cache_folder_follows_asrdecode_cache_then_xdg_then_home(tmp_path, monkeypatch):
    """$ASRDECODE_CACHE wins; else an absolute $XDG_CACHE_HOME (a relative one is ignored, as the XDG rule
    says); else ~/.cache. The native library's fallback folder is the same one."""
    from asrdecode.native import _lib

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ASRDECODE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert gc.cache_dir() == tmp_path / "home" / ".cache" / "asrdecode"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert gc.cache_dir() == tmp_path / "home" / ".cache" / "asrdecode"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gc.cache_dir() == tmp_path / "xdg" / "asrdecode"
    assert _lib._build_dirs()[-1] == tmp_path / "xdg" / "asrdecode"
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "mine"))
    assert gc.cache_dir() == tmp_path / "mine"
    entry = gc.cached_file("art", {"v": 4}, _small_build, log=lambda m: None)
    assert entry.path.parent == tmp_path / "mine" / "graphs"


def test_an_uncreatable_cache_folder_is_a_named_error_with_the_fix(tmp_path, monkeypatch):
    """A home folder that cannot be written (a container's non-root user with HOME=/nonexistent) used to end
    the default command with a bare "[Errno 13] Permission denied: '/nonexistent'"."""
    import pathlib

    home = tmp_path / "nonexistent"
    monkeypatch.delenv("ASRDECODE_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(home))
    real_mkdir = pathlib.Path.mkdir

    def refusing_mkdir(self, *args, **kwargs):
        if self == home or home in self.parents:
            raise PermissionError(13, "Permission denied", str(home))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "mkdir", refusing_mkdir)
    with pytest.raises(gc.CacheError, match=rf"{home}: cannot use the cache folder {home}/\.cache/asrdecode/"
                                            r"graphs \(Permission denied\); set ASRDECODE_CACHE"):
        gc.cached_file("art", {"v": 5}, _small_build, log=lambda m: None)
    real_exists = pathlib.Path.exists

    def refusing_exists(self, *args, **kwargs):  # a folder of another user's (mode 700): exists() raises EACCES
        if self == home or home in self.parents:
            raise PermissionError(13, "Permission denied", str(home))
        return real_exists(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "exists", refusing_exists)
    with pytest.raises(gc.CacheError, match=rf"{home}: cannot use the cache folder .*set ASRDECODE_CACHE"):
        gc.cached_file("art", {"v": 5}, _small_build, log=lambda m: None)
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "writable"))  # the fix the message names
    assert gc.cached_file("art", {"v": 5}, _small_build, log=lambda m: None).built
