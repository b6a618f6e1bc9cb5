"""Bundled demo models (``load("demo-ctc" | "demo-rnnt" | "demo-tdt")``) and model adapters."""

from .demo import CTCModel, DemoModel, available, build_model, load, save_checkpoint

__all__ = ["load", "available", "DemoModel", "CTCModel", "build_model", "save_checkpoint"]
