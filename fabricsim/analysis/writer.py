"""Writes a :class:`Result` as a results folder.

Layout (definitions in docs/metrics.md)::

    summary.json            headline figures, seed and run metadata
    run.json                status while running ("running") and after ("complete", ...)
    messages.{parquet,csv}  one row per message
    links.{parquet,csv}     one row per directed link
    latency_histogram.*     packet-latency histogram buckets
    goodput_timeseries.*    delivered payload per time bin
    collectives.*           one row per traced operation (traces with an op column only)
    link_timeseries.*       per link and sampling interval: bytes, utilisation, queue
    nics.*                  per host: reordering seen receiving, retransmissions sending
    scenario.resolved.yaml  the scenario with every default filled in

``messages.partial.csv`` streams completed messages during the run and is removed once the
final tables are written.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import yaml

from .result import Result, summary_json


TABLES = ("messages", "links", "latency_histogram", "goodput_timeseries", "collectives", "link_timeseries", "nics")


class ResultsFolder:
    def __init__(self, path: str | Path, formats=("parquet", "csv")):
        self.path = Path(path)
        self.formats = list(formats)

    def open(self, scenario: dict, seed: int) -> Path:
        """Create the folder and mark the run as started; returns the streaming messages path."""
        self.path.mkdir(parents=True, exist_ok=True)
        # a folder reused from an earlier run must not mix its tables with this run's
        stale = ["summary.json", "messages.partial.csv"] + [f"{t}.{fmt}" for t in TABLES for fmt in ("parquet", "csv")]
        for name in stale:
            f = self.path / name
            if f.exists():
                f.unlink()
        self._write_text("scenario.resolved.yaml", yaml.safe_dump(scenario, sort_keys=False))
        self._write_text("run.json", json.dumps({"status": "running", "seed": seed}, indent=2))
        return self.path / "messages.partial.csv"

    def _write_text(self, name: str, text: str):
        tmp = self.path / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def _table(self, name: str, df):
        for fmt in self.formats:
            tmp = self.path / f"{name}.{fmt}.tmp"
            if fmt == "parquet":
                df.to_parquet(tmp, index=False)
            else:
                df.to_csv(tmp, index=False)
            os.replace(tmp, self.path / f"{name}.{fmt}")

    def finish(self, result: Result):
        self._table("messages", result.messages)
        self._table("links", result.links)
        self._table("latency_histogram", result.latency)
        self._table("goodput_timeseries", result.goodput)
        if len(result.collectives):
            self._table("collectives", result.collectives)
        if len(result.link_timeseries):
            self._table("link_timeseries", result.link_timeseries)
        if len(result.nics):
            self._table("nics", result.nics)
        self._write_text("summary.json", summary_json(result.summary))
        self._write_text("run.json", json.dumps({"seed": result.summary["seed"], **result.summary["run"]},
                                                indent=2, default=str))
        partial = self.path / "messages.partial.csv"
        if partial.exists():
            partial.unlink()
        result.output_dir = self.path
