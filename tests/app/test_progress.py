"""asrdecode.progress: one policy for progress on stderr (bars on a terminal only, --quiet silences)."""

from __future__ import annotations

import io

import pytest

from asrdecode import progress as pg
from asrdecode.errors import DecodingInputError
from asrdecode.models import graph_cache as gc


class TTY(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _loud():
    pg.set_quiet(False)
    yield
    pg.set_quiet(False)


def test_bar_on_a_terminal_counts_units() -> None:
    tty = TTY()
    with pg.progress(3, "decoding", "utt", file=tty) as bar:
        for _ in range(3):
            bar.update(1)
    assert "decoding" in tty.getvalue() and "3/3" in tty.getvalue()


def test_fractional_totals_show_one_decimal() -> None:
    tty = TTY()
    with pg.progress(2.5, "long audio", "s", file=tty) as bar:
        bar.update(1.25)
        bar.update(1.25)
    assert "2.5/2.5 s" in tty.getvalue()


def test_no_bar_when_not_a_terminal_or_quiet() -> None:
    plain = io.StringIO()
    bar = pg.progress(4, "decoding", "utt", file=plain)
    assert isinstance(bar, pg.NoBar)
    bar.update(2)
    bar.update(2)
    bar.close()
    assert bar.n == 4 and plain.getvalue() == ""
    pg.set_quiet(True)
    tty = TTY()
    with pg.progress(4, "decoding", "utt", file=tty) as bar:
        bar.update(4)
    assert isinstance(bar, pg.NoBar) and tty.getvalue() == "" and pg.is_quiet()


def test_status_lines_print_unless_quiet() -> None:
    out = io.StringIO()
    pg.status("asrdecode: building x ...", file=out)
    pg.set_quiet(True)
    pg.status("asrdecode: hidden", file=out)
    assert out.getvalue() == "asrdecode: building x ...\n"


def test_bad_arguments_are_named_errors() -> None:
    with pytest.raises(DecodingInputError, match="total"):
        pg.progress(-1, "x")
    with pytest.raises(DecodingInputError, match="total"):
        pg.progress("3", "x")  # type: ignore[arg-type]
    with pytest.raises(DecodingInputError, match="quiet"):
        pg.set_quiet(1)  # type: ignore[arg-type]


def test_cached_build_is_announced_once_and_silenced_by_quiet(tmp_path, monkeypatch, capsys) -> None:
    # the phone-ctc graph's first-use build goes through cached_file with its default log
    monkeypatch.setenv("ASRDECODE_CACHE", str(tmp_path / "cache"))
    built = []

    def build(path):
        built.append(path)
        path.write_bytes(b"graph")

    gc.cached_file("g", {"v": 1}, build, what="the test graph")
    err = capsys.readouterr().err.splitlines()
    assert [ln.split(" (")[0] for ln in err] == ["asrdecode: building the test graph", "asrdecode: built the test graph in 0 s"]
    gc.cached_file("g", {"v": 1}, build, what="the test graph")  # cached: built once, nothing printed
    assert capsys.readouterr().err == "" and len(built) == 1
    pg.set_quiet(True)
    gc.cached_file("g", {"v": 2}, build, what="the test graph")
    assert capsys.readouterr().err == "" and len(built) == 2
