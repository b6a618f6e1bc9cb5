"""``python -m asrdecode.native``: build the native engine now (``make install`` runs it)."""

import sys

from ._lib import NativeEngineUnavailable, build

try:
    print(build(verbose=True))
except NativeEngineUnavailable as err:
    print(f"asrdecode: native engine not built: {err}", file=sys.stderr)
    sys.exit(0)  # the library works without it (the tensor engine is used)
