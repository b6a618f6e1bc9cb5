"""Acoustic models as the pipeline sees them: the ModelBundle protocol, the bundled demo models
(``load("demo-ctc" | "demo-rnnt" | "demo-tdt")``), hama's phone CTC model (``phone-ctc``, needs the
``hama`` extra) and ``load_bundle`` for any ``--model`` argument."""

import sys
from importlib.util import find_spec

from .bundle import CTCModel, ModelBundle, check_bundle, load_bundle, register_loader
from .demo import DemoCTCHead, DemoModel, available, build_model, load, save_checkpoint
from .phone import PHONE_CTC, PhoneCTCBundle, load_phone_ctc

__all__ = ["load", "load_bundle", "available", "ModelBundle", "CTCModel", "check_bundle", "register_loader",
           "DemoModel", "DemoCTCHead", "build_model", "save_checkpoint", "PhoneCTCBundle", "default_model",
           "hama_installed"]

register_loader(lambda spec: spec == PHONE_CTC or spec.startswith(PHONE_CTC + ":"), load_phone_ctc,
                names=(PHONE_CTC,))


def hama_installed() -> bool:
    """Whether the optional ``hama`` package (the phone-ctc model) can be imported."""
    return find_spec("hama") is not None


#: the model used when hama (a core dependency) cannot be imported: synthetic speech only
FALLBACK_MODEL = "demo-rnnt"
_fallback_noted = False


def default_model() -> str:
    """The model the CLI uses without ``--model``: ``phone-ctc`` (real speech; hama is a core
    dependency). In an environment without hama it is ``demo-rnnt``, trained on synthetic speech
    only, and a one-line notice on stderr says so (once per process)."""
    global _fallback_noted
    if hama_installed():
        return PHONE_CTC
    if not _fallback_noted:
        _fallback_noted = True
        print(f"asrdecode: notice: hama is not installed, so the default model is {FALLBACK_MODEL} (synthetic "
              f"speech only; poor on real speech); `pip install hama==1.7.0` for {PHONE_CTC}", file=sys.stderr)
    return FALLBACK_MODEL
