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
final tables are written. ``report.html`` (``fabricsim run --report``, ``fabricsim report``) and
``plots/`` (``fabricsim plot``) are written later, from the folder.

One folder holds one run. :meth:`ResultsFolder.open` refuses, with a
:class:`~fabricsim.errors.ConfigError` (exit 2) and before anything is written, a folder that
holds the results of another scenario (another resolved scenario: other settings, ``--set``
overrides or seed), a folder with files that are no results, or a folder another live run is
writing into, unless ``overwrite``; it then removes every artefact of the run before (the tables,
``report.html``, ``plots/``, ...; never other files), so nothing stale is left behind.
``summary.json``, ``run.json`` and every Parquet file's metadata (key ``fabricsim_results_format``)
carry :data:`~fabricsim.analysis.status.RESULTS_FORMAT`.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import yaml

from ..errors import ConfigError
from .outpath import check_writable_dir, check_writable_file  # noqa: F401 - (re-exported)
from .result import Result, summary_json
from .status import RESULTS_FORMAT


TABLES = ("messages", "links", "latency_histogram", "goodput_timeseries", "collectives", "link_timeseries", "nics")
#: every file a run (and ``report`` / ``plot`` after it) writes into its folder
ARTEFACTS = (["summary.json", "run.json", "scenario.resolved.yaml", "messages.partial.csv", "report.html"]
             + [f"{t}.{fmt}" for t in TABLES for fmt in ("parquet", "csv")])
#: folders of artefacts
ARTEFACT_DIRS = ("plots",)
#: Parquet schema metadata key holding the results format
PARQUET_FORMAT_KEY = b"fabricsim_results_format"


def scenario_hash(scenario: dict) -> str:
    """Short hash (8 hex digits) of a resolved scenario (``Scenario.model_dump(mode="json")``:
    every default filled in, ``--set`` overrides and the seed applied): names its default folder.

    >>> a, b = {"name": "a", "simulation": {"seed": 1}}, {"name": "a", "simulation": {"seed": 2}}
    >>> len(scenario_hash(a)), scenario_hash(a) != scenario_hash(b)
    (8, True)
    """
    text = json.dumps(scenario, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def default_results_dir(scenario: dict, root: str | Path = "results", inputs=()) -> Path:
    """``results/<name>-<hash>``: one folder per resolved scenario and the contents of the files it
    reads (``inputs``: :meth:`~fabricsim.config.scenario.LoadedScenario.input_files`), so the same
    scenario text beside another trace or topology file gets a folder of its own."""
    if not inputs:
        return Path(root) / f"{scenario['name']}-{scenario_hash(scenario)}"
    h = hashlib.sha256(scenario_hash(scenario).encode())
    for f in inputs:
        try:
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            h.update(str(f).encode())     # (validation has read it; a vanished file still names it)
    return Path(root) / f"{scenario['name']}-{h.hexdigest()[:8]}"


def remove_artefacts(path: Path) -> None:
    """Remove what a run (and ``report`` / ``plot`` after it) wrote into ``path``: its files
    (:data:`ARTEFACTS`) and, in ``plots/``, the PNG files ``fabricsim plot`` writes (the folder
    too once empty); never anything else."""
    for name in ARTEFACTS:
        f = path / name
        if f.is_file() or f.is_symlink():
            f.unlink()
    for name in ARTEFACT_DIRS:
        d = path / name
        if d.is_dir():
            for f in d.glob("*.png"):
                if f.is_file():
                    f.unlink()
            if not any(d.iterdir()):
                d.rmdir()


def _pid_alive(pid) -> bool:
    if not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:       # pragma: no cover - someone else's live process
        return True
    return True


class ResultsFolder:
    def __init__(self, path: str | Path, formats=("parquet", "csv"), overwrite: bool = False):
        self.path = Path(path)
        self.formats = list(formats)
        self.overwrite = overwrite
        self._run: dict = {}          # run.json's fields, once open() wrote it

    def check(self, scenario: dict) -> None:
        """Refuse (ConfigError, exit 2) a folder that cannot hold this run; writes nothing."""
        path = check_writable_dir(self.path)
        for name in ARTEFACTS:
            if (path / name).is_dir():
                raise ConfigError("is a folder, not a results file: remove it", source=str(path / name),
                                  field="--output")
        for name in ARTEFACT_DIRS:
            if (path / name).exists() and not (path / name).is_dir():
                raise ConfigError("is a file, not the plots folder: remove it", source=str(path / name),
                                  field="--output")
        if not path.is_dir() or not any(path.iterdir()) or self.overwrite:
            return
        hint = "(allowed: another folder, or --force / overwrite=True to replace its results)"
        run = self._read_json("run.json")
        if run.get("status") == "running" and _pid_alive(run.get("pid")):
            raise ConfigError(f"another run (pid {run['pid']}) is writing into this folder {hint}",
                              source=str(path), field="--output")
        mine = scenario_hash(scenario)
        theirs = None
        resolved = path / "scenario.resolved.yaml"
        if resolved.is_file():
            try:
                theirs = scenario_hash(yaml.safe_load(resolved.read_text()))
            except (yaml.YAMLError, OSError, TypeError):
                theirs = None
        if theirs is None:
            # files named like results are a run's only if a fabricsim run.json says so: a user's
            # own messages.csv or plots/ must not be taken for stale artefacts and removed
            ours = set(ARTEFACTS) | set(ARTEFACT_DIRS)
            foreign = [p for p in path.iterdir() if p.name not in ours and not p.name.endswith(".tmp")]
            if foreign or "results_format" not in run:
                raise ConfigError(f"is not empty and holds no fabricsim results {hint}", source=str(path),
                                  field="--output")
            return                    # only (stale) artefacts of a run that left no scenario: replaced
        if theirs != mine:
            other = run.get("scenario") or "another scenario"
            raise ConfigError(f"holds the results of another scenario ({other}, scenario hash {theirs}; this run: "
                              f"{mine}) {hint}", source=str(path), field="--output")

    def _read_json(self, name: str) -> dict:
        try:
            d = json.loads((self.path / name).read_text())
        except (OSError, ValueError):
            return {}
        return d if isinstance(d, dict) else {}

    def open(self, scenario: dict, seed: int) -> Path:
        """Check the folder (:meth:`check`), create it, remove the artefacts of any run before and
        mark the run as started; returns the streaming messages path."""
        self.check(scenario)
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            remove_artefacts(self.path)
            self._write_text("scenario.resolved.yaml", yaml.safe_dump(scenario, sort_keys=False))
            self._run = {"status": "running", "scenario": scenario.get("name"),
                         "scenario_hash": scenario_hash(scenario), "seed": seed, "results_format": RESULTS_FORMAT,
                         "pid": os.getpid()}
            self._write_text("run.json", json.dumps(self._run, indent=2))
        except OSError as exc:
            raise ConfigError(f"cannot be written: {exc.strerror or exc}", source=str(self.path),
                              field="--output") from None
        return self.path / "messages.partial.csv"

    def fail(self, status: str, reason: str, traceback: str | None = None):
        """The run ended without its tables (``failed``: the simulator raised; ``interrupted``
        before the engine started): ``run.json`` says so, with the reason, and the messages
        finished before it stay in ``messages.partial.csv``."""
        if not self.path.is_dir():
            return
        partial = self.path / "messages.partial.csv"
        streamed = 0
        if partial.is_file():
            with open(partial) as fh:
                streamed = max(sum(1 for _ in fh) - 1, 0)
        run = {k: v for k, v in self._run.items() if k != "pid"}
        run.update(status=status, reason=reason, results_format=RESULTS_FORMAT,
                   messages_file="messages.partial.csv" if partial.is_file() else None,
                   messages_ended=streamed)
        if traceback:
            run["traceback"] = traceback
        try:
            self._write_text("run.json", json.dumps(run, indent=2, default=str))
        except OSError:                # pragma: no cover - the folder went away
            pass

    def _write_text(self, name: str, text: str):
        tmp = self.path / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path / name)

    def _table(self, name: str, df):
        for fmt in self.formats:
            tmp = self.path / f"{name}.{fmt}.tmp"
            if fmt == "parquet":
                import pyarrow as pa
                import pyarrow.parquet as pq
                table = pa.Table.from_pandas(df, preserve_index=False)
                meta = dict(table.schema.metadata or {})
                meta[PARQUET_FORMAT_KEY] = str(RESULTS_FORMAT).encode()
                pq.write_table(table.replace_schema_metadata(meta), tmp)
            else:
                df.to_csv(tmp, index=False)
            os.replace(tmp, self.path / f"{name}.{fmt}")

    def finish(self, result: Result, progress=None):
        """Write every table of ``result`` and the final ``summary.json`` / ``run.json``;
        ``progress(text)`` (optional) is told each table before it is written."""
        tables = [("messages", result.messages), ("links", result.links), ("latency_histogram", result.latency),
                  ("goodput_timeseries", result.goodput)]
        tables += [(name, df) for name, df in (("collectives", result.collectives),
                                               ("link_timeseries", result.link_timeseries), ("nics", result.nics))
                   if len(df)]
        for name, df in tables:
            if progress is not None:
                progress(f"writing {name} ({len(df):,} rows, {'/'.join(self.formats)})")
            self._table(name, df)
        self._write_text("summary.json", summary_json(result.summary))
        run = {k: v for k, v in self._run.items() if k != "pid"}
        self._write_text("run.json", json.dumps({**run, "seed": result.summary["seed"], **result.summary["run"]},
                                                indent=2, default=str))
        partial = self.path / "messages.partial.csv"
        if partial.exists():
            partial.unlink()
        result.output_dir = self.path
