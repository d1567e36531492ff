"""Read a results folder (see :mod:`fabricsim.analysis.writer`) back into a :class:`Result`."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml

from ..errors import ConfigError
from .result import Result
from .status import RESULTS_FORMAT

#: Result attribute -> table file stem
#: (every table :class:`~fabricsim.analysis.writer.ResultsFolder` writes; a test checks the two agree)
_TABLES = {"messages": "messages", "links": "links", "latency": "latency_histogram",
           "goodput": "goodput_timeseries", "collectives": "collectives",
           "link_timeseries": "link_timeseries", "nics": "nics"}


def _read_table(folder: Path, stem: str) -> pd.DataFrame:
    pq, csv = folder / f"{stem}.parquet", folder / f"{stem}.csv"
    if pq.exists():
        return pd.read_parquet(pq)
    if csv.exists():
        return pd.read_csv(csv)
    return pd.DataFrame()


def load_results(path: str | Path) -> Result:
    """Load the results folder ``path`` (parquet tables, or csv if no parquet, plus
    ``summary.json`` and ``scenario.resolved.yaml``) as a :class:`Result`.

    Raises :class:`~fabricsim.errors.ConfigError` if the folder has no ``summary.json``
    (not a results folder, or a run that has not finished), or if its ``results_format`` is not
    the one this version writes and reads.
    """
    folder = Path(path)
    summary_file = folder / "summary.json"
    if not folder.is_dir():
        raise ConfigError("not a results folder (no such directory)", source=str(folder))
    if not summary_file.exists():
        raise ConfigError("not a finished results folder (no summary.json)", source=str(folder))
    try:
        summary = json.loads(summary_file.read_text())
    except ValueError as exc:
        raise ConfigError(f"summary.json is not valid JSON ({exc})", source=str(summary_file)) from None
    fmt = summary.get("results_format") if isinstance(summary, dict) else None
    if fmt != RESULTS_FORMAT:
        # a folder of another format may name or define figures differently: refuse to guess
        raise ConfigError(f"results format {fmt!r} (allowed: {RESULTS_FORMAT}, the format this fabricsim "
                          "reads; rerun the scenario to rewrite the folder)", source=str(folder))
    scen_file = folder / "scenario.resolved.yaml"
    scenario = (yaml.safe_load(scen_file.read_text()) or {}) if scen_file.exists() else {}
    tables = {attr: _read_table(folder, stem) for attr, stem in _TABLES.items()}
    return Result(summary=summary, scenario=scenario, output_dir=folder, **tables)
