"""Sweeps: a base scenario times a grid of overrides times seeds, run on an executor.

``fabricsim sweep SWEEP.yaml`` (docs/sweeps.md). The nouns, one per module:
:mod:`~fabricsim.sweep.spec` (the sweep file and its points), :mod:`~fabricsim.sweep.executor`
(serial, processes, dask), :mod:`~fabricsim.sweep.runner` (check, resume, run, progress) and
:mod:`~fabricsim.sweep.store` (the Parquet dataset and the summary).
"""
from __future__ import annotations

__all__ = ["run_sweep", "load_spec", "parse_spec"]


def __getattr__(name):
    # the submodules import pandas / pyarrow on use only; resolve the names on first access
    if name == "run_sweep":
        from .runner import run_sweep
        return run_sweep
    if name in ("load_spec", "parse_spec"):
        from . import spec
        return getattr(spec, name)
    raise AttributeError(name)
