"""The C ABI described once: every ctypes mirror (asrdecode.native.abi) against the layout the library
reports (abi.cpp's table of sizeof / offsetof over abi.h)."""

from __future__ import annotations

import ctypes

import pytest

from asrdecode.native import _lib
from asrdecode.native.abi import MIRRORS, c_layout

pytestmark = pytest.mark.skipif(not _lib.available(), reason="native engine unavailable")


@pytest.fixture(scope="module")
def layout():
    return c_layout(_lib.load())


def test_every_c_struct_has_a_mirror_and_back(layout):
    assert set(layout) == set(MIRRORS)


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_mirror_matches_c_layout(layout, name):
    cls = MIRRORS[name]
    size, fields = layout[name]
    assert ctypes.sizeof(cls) == size
    py = [(f, getattr(cls, f).offset, getattr(cls, f).size) for f, _ in cls._fields_]
    assert [f[0] for f in py] == [f[0] for f in fields]  # names, in order
    assert py == fields  # offsets and sizes


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_c_table_lists_every_field(layout, name):
    """The table tiles the struct: the gaps between listed fields are alignment padding only, so a C field
    missing from the table (and so from the check above) cannot hide."""
    size, fields = layout[name]
    end = 0
    for _, off, sz in fields:
        assert 0 <= off - end < min(sz, 8)
        end = off + sz
    assert 0 <= size - end < 8


def test_one_fusion_descriptor_for_every_engine():
    from asrdecode.native import ctc_beam, transducer_beam, transducer_wind
    from asrdecode.native.abi import FusionDesc

    assert ctc_beam._Model is FusionDesc
    assert transducer_beam._Model is FusionDesc
    assert issubclass(transducer_wind.NativeWindStep, transducer_beam.EngineStep)  # (its descriptors)


def test_generated_mirrors_and_layout_table_are_fresh():
    """abi.py and abi_layout.inc are what abi_gen makes from abi.h (change abi.h, then rerun the generator)."""
    from asrdecode.native import abi_gen

    for path, text in abi_gen.outputs().items():
        assert path.read_text() == text, f"{path.name} is stale: run python -m asrdecode.native.abi_gen"


def test_generator_reads_every_declaration_form(tmp_path):
    from asrdecode.native import abi_gen

    header = tmp_path / "abi.h"
    header.write_text("namespace asrd {\nstruct Inner {\n  int64_t a, b;  // two\n  double c;\n};\n"
                      "struct Outer {\n  Inner in;\n  const Inner* many;  // an array\n  const int64_t* const* rows;\n"
                      "  float f; void* p;\n};\n}\n")
    structs = abi_gen.parse_header(header.read_text())
    assert [(s.name, s.fields) for s in structs] == [
        ("Inner", (("a", "int64_t"), ("b", "int64_t"), ("c", "double"))),
        ("Outer", (("in", "Inner"), ("many", "const Inner*"), ("rows", "const int64_t* const*"), ("f", "float"),
                   ("p", "void*"))),
    ]
    namespace: dict = {"__name__": "asrdecode.native._abi_test", "__package__": "asrdecode.native"}
    exec(abi_gen.outputs(header)[tmp_path / "abi.py"], namespace)  # its relative imports: as if in the package
    outer = namespace["Outer"]
    assert [f for f, _ in outer._fields_] == ["in", "many", "rows", "f", "p"]
    assert outer._fields_[1][1]._type_ is namespace["Inner"]
    with pytest.raises(TypeError, match="no field 'g'"):
        outer(g=1)
    with pytest.raises(TypeError):
        outer(1)  # by field name only


def test_generator_names_a_line_it_cannot_read(tmp_path):
    from asrdecode.native import abi_gen

    with pytest.raises(abi_gen.AbiHeaderError, match="abi.h:3"):
        abi_gen.parse_header("struct A {\n  int64_t a;\n  int64_t b[4];\n};\n")
    with pytest.raises(abi_gen.AbiHeaderError, match="no ctypes mapping"):
        abi_gen.render_mirrors(abi_gen.parse_header("struct A {\n  uint16_t a;\n};\n"))


def test_exports_table_lists_every_c_export_and_the_library_has_them():
    """native/exports.py is the one table of the C exports' signatures: every ``asrd_*`` function the sources
    define is listed (and nothing else), and the loaded library exports each with its table signature."""
    import re
    from pathlib import Path

    from asrdecode.native.exports import EXPORTS

    src = Path(_lib.__file__).parent
    defined = set()
    for path in src.glob("*.cpp"):
        defined |= set(re.findall(r"^(?:int|void|int64_t|void\*)\s+(asrd_\w+)\(", path.read_text(), re.M))
    assert defined == set(EXPORTS)
    lib = _lib.load()
    for name, (restype, argtypes) in EXPORTS.items():
        fn = getattr(lib, name)
        assert (fn.restype, fn.argtypes) == (restype, argtypes), name
