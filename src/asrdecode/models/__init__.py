"""Acoustic models as the pipeline sees them: the ModelBundle protocol, the bundled demo models
(``load("demo-ctc" | "demo-rnnt" | "demo-tdt")``) and ``load_bundle`` for any ``--model`` argument."""

from .bundle import CTCModel, ModelBundle, check_bundle, load_bundle, register_loader
from .demo import DemoCTCHead, DemoModel, available, build_model, load, save_checkpoint

__all__ = ["load", "load_bundle", "available", "ModelBundle", "CTCModel", "check_bundle", "register_loader",
           "DemoModel", "DemoCTCHead", "build_model", "save_checkpoint"]
