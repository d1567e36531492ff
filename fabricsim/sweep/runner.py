"""Running a sweep: check every point, skip the finished ones, run the rest on an executor.

:func:`run_sweep` does, in order:

1. **check** (:func:`check`): every point is validated as a scenario (topology and traffic built
   once per combination) before anything is written; a bad point is one
   :class:`~fabricsim.errors.ConfigError` naming the sweep file and the axis value at fault
   (``sweep.yaml:7: grid.routing[1]: unknown routing policy ...``). Each point gets its id, the
   :func:`~fabricsim.sweep.spec.point_hash` of its resolved scenario.
2. **resume**: points whose id is in the results folder already are skipped (failed ones too,
   unless ``retry_failed``); only the missing ones run.
3. **run** on the executor (:mod:`fabricsim.sweep.executor`): each finished point's row goes to
   the dataset (:mod:`fabricsim.sweep.store`) as it arrives. A point that fails is recorded
   (status ``failed`` and its reason) and the others go on. Ctrl-C (or SIGTERM) stops the sweep:
   the finished points are kept, the running ones are abandoned (they run again on resume).
4. **tables**: ``points.csv`` and the summary over every point of the sweep, old and new.

Progress (``progress`` callback) receives a :class:`Progress` after every point.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError, FabricsimError
from .spec import Point, SweepSpec, load_spec, point_hash

__all__ = ["run_sweep", "check", "run_point", "PointTask", "Progress", "SweepResult"]


@dataclass
class PointTask:
    """What a worker needs to run one point (plain data: it is pickled to other processes).

    ``source``: a scenario path or mapping (or a :class:`~fabricsim.Scenario`); ``base_dir``: where
    an inline scenario's relative paths resolve (None: the current folder); ``run``: the function
    that runs it (default :func:`fabricsim.api.run`; a module-level function, importable by name
    on the workers, with the same signature). It is called as ``run(source, output_dir=...,
    overrides=..., seed=..., overwrite=True)``; for an inline scenario with a ``base_dir``, as
    ``run(loaded, output_dir=..., overwrite=True)`` with the scenario loaded (overrides and seed
    applied) and its relative paths resolving in ``base_dir``."""

    source: Any
    overrides: list
    seed: int | None
    run_dir: str | None = None
    base_dir: str | None = None
    run: Callable | None = None


def run_point(task: PointTask) -> dict:
    """Run one point; never raises for the point's own failure.

    Returns ``{"status", "reason", "metrics"}``: the run's status and
    :func:`fabricsim.compare.metrics_of` its summary, or status ``failed``, the reason (exception
    type and message on one line) and no metrics."""
    from ..compare import metrics_of
    run = task.run
    if run is None:
        from ..api import run
    source = task.source
    try:
        if task.base_dir is not None and isinstance(source, dict):
            from ..config import load_scenario
            loaded = load_scenario(source, task.overrides, task.seed)
            loaded.base_dir = Path(task.base_dir)
            res = run(loaded, output_dir=task.run_dir, overwrite=True)
        else:
            res = run(source, output_dir=task.run_dir, overrides=task.overrides, seed=task.seed, overwrite=True)
    except KeyboardInterrupt:
        return {"status": "interrupted", "reason": "interrupted before the run started", "metrics": {}}
    except Exception as exc:    # noqa: BLE001 - one failing point must not abort the others
        return {"status": "failed", "reason": f"{type(exc).__name__}: {' '.join(str(exc).split())}", "metrics": {}}
    m = metrics_of(res.summary)
    return {"status": m["status"], "reason": "", "metrics": m}


@dataclass
class Progress:
    """Where a sweep stands: points done (this session and before), running, remaining."""

    total: int
    skipped: int = 0          # finished in an earlier session
    done: int = 0             # finished in this session
    failed: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def remaining(self) -> int:
        return self.total - self.skipped - self.done - self.running

    @property
    def eta_s(self) -> float | None:
        """Seconds left at this session's pace (None before the first point is done)."""
        if not self.done:
            return None
        rate = self.done / max(time.monotonic() - self.started, 1e-9)
        return (self.remaining + self.running) / rate

    def line(self) -> str:
        """``sweep: 40/100 done (3 failed), 2 running, 58 remaining, eta 1m05s``."""
        eta = self.eta_s
        if eta is None:
            text = "eta n/a"
        else:
            m, s = divmod(int(round(eta)), 60)
            h, m = divmod(m, 60)
            text = f"eta {h}h{m:02d}m" if h else (f"eta {m}m{s:02d}s" if m else f"eta {s}s")
        failed = f" ({self.failed} failed)" if self.failed else ""
        return (f"sweep: {self.skipped + self.done}/{self.total} done{failed}, {self.running} running, "
                f"{self.remaining} remaining, {text}")


@dataclass
class SweepResult:
    """What :func:`run_sweep` returns: the table of every point of the sweep (in sweep order;
    points not finished are absent), its summary, and the session's counts."""

    table: Any
    summary: Any
    keys: list
    output_dir: Path
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    interrupted: bool = False
    total: int = 0


def _strip_set(msg: str) -> str:
    return re.sub(r"\s*\(from --set [^)]*\)$", "", msg)


def check(spec: SweepSpec, topologies: dict | None = None) -> list[Point]:
    """Validate every point as a scenario; returns the points with their ids set.

    Raises one ConfigError naming the sweep file, and the axis value at fault where the error is
    in a varied field (else the base scenario's own error, with the point)."""
    from ..api import prepare
    from ..config import load_scenario
    from ..config.scenario import parse_field

    try:
        base = load_scenario(spec.base)
    except ConfigError as exc:
        if isinstance(spec.base, dict):
            raise spec.error(f"{exc.field + ': ' if exc.field else ''}{exc.message}", "base") from None
        raise
    points = spec.points(base.scenario.simulation.seed)
    topologies = {} if topologies is None else topologies
    prepared: set = set()
    for p in points:
        try:
            loaded = load_scenario(spec.base, p.overrides, p.seed)
            if isinstance(spec.base, dict):
                loaded.base_dir = Path(spec.base_dir)
            if p.positions not in prepared:      # topology and traffic once per combination
                prepare(loaded, topologies=topologies)
                prepared.add(p.positions)
        except ConfigError as exc:
            try:
                loc = tuple(str(x) for x in parse_field(exc.field)) if exc.field else ()
            except ValueError:
                loc = ()
            culprit = None
            for axis, i in zip(spec.axes, p.positions):
                for key, path in zip(axis.keys, axis.paths):
                    kp = tuple(path.split("."))
                    n = min(len(kp), len(loc))
                    if n and loc[:n] == kp[:n]:
                        culprit = (axis, key, path, i)
            msg = _strip_set(exc.message)
            if culprit is not None:
                axis, key, path, i = culprit
                where = ("grid", key) if axis.where == "grid" else ("zip", int(axis.where[4:-1]), key)
                inner = f"{exc.field}: " if exc.field and exc.field != path else ""
                raise spec.error(f"{inner}{msg}", *where, i) from None
            at = ", ".join(f"{k}={v}" for k, v in p.identity.items())
            inner = f"{exc.field}: " if exc.field else ""
            raise spec.error(f"{inner}{msg} (at point {at or 'base'} seed {p.seed})", "base") from None
        p.point_id = point_hash(loaded.scenario.model_dump(mode="json"))
    return points


def run_sweep(spec: SweepSpec | str | Path, output_dir: str | Path | None = None, executor=None,
              jobs: int | None = None, scheduler: str | None = None, keep_runs: bool = False,
              retry_failed: bool = False, include_incomplete: bool = False,
              progress: Callable[[Progress], None] | None = None, run: Callable | None = None,
              **executor_options) -> SweepResult:
    """Run a sweep (a :class:`~fabricsim.sweep.spec.SweepSpec` or a sweep file) into
    ``output_dir`` (default ``results/<sweep name>-sweep``); see the module doc.

    Parameters
    ----------
    executor, jobs, scheduler:
        Where the points run (:func:`fabricsim.sweep.executor.make_executor`: ``serial``,
        ``processes`` (default) or ``dask``; an :class:`~fabricsim.sweep.executor.Executor`
        instance is used as given).
    keep_runs:
        Also write each point's full results folder to ``output_dir/runs/<point_id>/``.
    retry_failed:
        Run the points recorded as failed again (by default a resume runs only missing points).
    include_incomplete:
        Count incomplete runs in the summary's means (:func:`fabricsim.compare.summarize`).
    progress:
        Called with a :class:`Progress` after every point (and once before the first).
    run:
        The function each point runs with (default :func:`fabricsim.api.run`; module-level).
    """
    from ..analysis.outpath import check_owned_dir
    from ..analysis.status import RESULTS_FORMAT
    from ..api import StopSignals
    from .executor import make_executor
    from .store import MANIFEST, SweepStore

    if not isinstance(spec, SweepSpec):
        spec = load_spec(spec)
    points = check(spec)                       # every point valid before anything is written
    out = Path(output_dir) if output_dir is not None else Path("results") / f"{spec.name}-sweep"
    check_owned_dir(out, MANIFEST, "sweep")     # a folder of the user's own files: refused
    ex = make_executor(executor, jobs=jobs, scheduler=scheduler, **executor_options)
    key_values = {}
    for axis in spec.axes:
        for j, key in enumerate(axis.keys):
            key_values[key] = [v[j] for v in axis.values]
    store = SweepStore(out, key_values)
    ids = [p.point_id for p in points]
    if len(set(ids)) != len(ids):
        dup = next(p for i, p in enumerate(points) if p.point_id in ids[:i])
        raise spec.error(f"two points resolve to the same scenario (one is "
                         f"{', '.join(f'{k}={v}' for k, v in dup.identity.items())} seed {dup.seed}; allowed: "
                         f"values that change the scenario)", "grid")
    ex.start()                                 # a missing extra or an unreachable scheduler: before writing
    try:
        if retry_failed:
            store.drop_failed()
        done_before = store.finished()
        todo = [p for p in points if p.point_id not in done_before]
        store.write_manifest({
            "results_format": RESULTS_FORMAT, "sweep": spec.name, "description": spec.description,
            "source": spec.source,
            "base": spec.base if isinstance(spec.base, str) else "<inline>", "keys": spec.keys,
            "seeds": sorted({p.seed for p in points}),
            "points": [{"point_id": p.point_id, "seed": p.seed, **{k: v for k, v in p.identity.items()}}
                       for p in points]})
        base_dir = spec.base_dir if isinstance(spec.base, dict) else None
        tasks = [PointTask(spec.base, p.overrides, p.seed,
                           str(out / "runs" / p.point_id) if keep_runs else None, base_dir, run) for p in todo]
        prog = Progress(total=len(points), skipped=len(points) - len(todo))
        interrupted = False
        failed = 0
        with StopSignals() as signals:    # SIGTERM ends the sweep as Ctrl-C does
            try:
                if progress is not None:
                    progress(prog)
                for pos, res in ex.imap(run_point, tasks):
                    if isinstance(res, BaseException):     # the executor lost the task (a worker died)
                        res = {"status": "failed", "reason": f"{type(res).__name__}: {' '.join(str(res).split())}",
                               "metrics": {}}
                    if res["status"] == "interrupted":      # stopped mid-run: not finished, runs again
                        raise KeyboardInterrupt
                    p = todo[pos]
                    row = {**p.identity, "seed": p.seed, "point_id": p.point_id, "status": res["status"],
                           "reason": res["reason"], **{k: res["metrics"].get(k) for k in store.metrics}}
                    store.add(row)
                    prog.done += 1
                    if res["status"] == "failed":
                        failed += 1
                        prog.failed += 1
                    prog.running = ex.running()
                    if progress is not None:
                        progress(prog)
            except KeyboardInterrupt:
                interrupted = True
            except BaseException:
                store.flush()             # an unexpected error: the points finished so far are kept
                raise
            signals.defer()               # what finished is written whatever is pressed now
            store.flush()
            ex.close(cancel=interrupted)
            table = store.table(ids)
            summary = store.write_tables(table, include_incomplete=include_incomplete)
    finally:
        ex.close(cancel=True)
    return SweepResult(table=table, summary=summary, keys=spec.keys, output_dir=out, ran=prog.done,
                       skipped=prog.skipped, failed=failed, interrupted=interrupted, total=len(points))
