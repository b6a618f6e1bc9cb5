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
    assert transducer_beam._Model is FusionDesc and transducer_wind._Model is FusionDesc
