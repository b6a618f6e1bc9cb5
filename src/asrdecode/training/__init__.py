"""Training utilities: pure-torch RNN-T and TDT losses."""

from .loss import lattice_log_likelihood, rnnt_loss, tdt_loss

__all__ = ["rnnt_loss", "tdt_loss", "lattice_log_likelihood"]
