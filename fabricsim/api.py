"""The Python API: what notebooks import.

>>> import fabricsim
>>> res = fabricsim.run({"name": "doc", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
...                      "traffic": {"pattern": "permutation", "message_size": "64KiB"}})
>>> res.summary["messages"]["completed"]
4
>>> list(res.messages.columns[:4])
['message_id', 'src', 'dst', 'size_bytes']
"""
from __future__ import annotations

import time
from pathlib import Path

from . import __version__
from .analysis.recorder import Recorder
from .analysis.result import Result, build_result
from .analysis.writer import ResultsFolder
from .config import LoadedScenario, Scenario, load_scenario
from .engine import ENGINES, SimulationInput
from .engine.rng import RandomStreams
from .errors import ConfigError, FabricsimError, SimulationError
from .topology import Topology, build_topology
from .topology.paths import EqualCostPaths
from .traffic import generate

__all__ = ["load_scenario", "prepare", "run", "Result", "Scenario"]


def prepare(source, overrides=(), seed: int | None = None,
            topologies: dict | None = None) -> tuple[LoadedScenario, SimulationInput]:
    """Validate a scenario and build everything a run needs (topology, paths, messages).

    All input errors are raised here, as :class:`~fabricsim.errors.ConfigError`, before any
    output is written. ``topologies``: a dict kept by the caller across calls (``compare`` keeps
    one for all its runs): a topology section already built (the same settings, relative to the
    same scenario file) is reused with its paths instead of being built again; builds are
    deterministic and engines never change a topology.
    """
    loaded = source if isinstance(source, LoadedScenario) else load_scenario(source, overrides, seed)
    sc = loaded.scenario
    key = None
    if topologies is not None:
        import json
        key = (str(loaded.source), json.dumps(sc.topology.model_dump(mode="json"), sort_keys=True))
    try:
        built = topologies.get(key) if key is not None else None
        if built is None:
            topo: Topology = build_topology(sc.topology, source=loaded.source, resolve=loaded.resolve_path)
            built = (topo, EqualCostPaths(topo))
            if key is not None:
                topologies[key] = built
        topo = built[0]
        streams = RandomStreams(sc.simulation.seed)
        messages = generate(sc.traffic, topo, streams, source=loaded.source, resolve=loaded.resolve_path)
    except ConfigError as exc:
        if isinstance(source, (str, Path)):
            # errors found while building name a field of the scenario file: add its line
            from .config.scenario import locate, parse_overrides
            locate(exc, source, overrides=parse_overrides(list(overrides)))
        raise
    return loaded, SimulationInput(scenario=sc, topology=topo, paths=built[1], messages=messages, streams=streams)


def run(source, output_dir: str | Path | None = None, overrides=(), seed: int | None = None,
        progress: bool = False, topologies: dict | None = None, estimate_warning: str | None = "",
        overwrite: bool = False) -> Result:
    """Run a scenario (YAML path, dict, :class:`Scenario`, :class:`LoadedScenario`, or the
    :class:`~fabricsim.engine.SimulationInput` :func:`prepare` returned: then nothing is built
    again and ``overrides`` / ``seed`` must be empty).

    Parameters
    ----------
    output_dir:
        Write a results folder there; ``None`` keeps everything in memory. A folder that holds
        the results of another scenario (or files that are no results) is refused with a
        :class:`~fabricsim.errors.ConfigError` before the run starts, unless ``overwrite``; the
        artefacts of an earlier run of the same scenario are replaced
        (:class:`~fabricsim.analysis.writer.ResultsFolder`).
    overrides:
        ``"key.path=value"`` strings, as ``fabricsim run --set``.
    seed:
        Replaces ``simulation.seed``.
    progress:
        Show a progress bar in simulated time.
    topologies:
        Topologies already built, reused (see :func:`prepare`).
    estimate_warning:
        The long-run warning of :func:`fabricsim.engine.estimate.long_run_warning` if the caller
        computed it already (``""``: compute it here); it goes into the summary's warnings.
    overwrite:
        Replace the results in ``output_dir`` even if they are another scenario's.
    """
    if isinstance(source, SimulationInput):
        if overrides or seed is not None:
            raise ConfigError("a prepared simulation takes no overrides or seed (allowed: pass them to prepare())",
                              field="overrides")
        sim = source
    else:
        _loaded, sim = prepare(source, overrides, seed, topologies)
    sc = sim.scenario
    folder = None
    stream = None
    if output_dir is not None:
        folder = ResultsFolder(output_dir, sc.outputs.formats, overwrite=overwrite)
        stream = folder.open(sc.model_dump(mode="json"), sc.simulation.seed)
    if estimate_warning == "":
        from .engine.estimate import long_run_warning
        estimate_warning = long_run_warning(sim)
        if estimate_warning:   # said before the run starts (a notebook user may interrupt it)
            import warnings
            warnings.warn(estimate_warning, stacklevel=2)
    recorder = Recorder(sc.outputs.latency_rel_error, sc.outputs.timeseries_bin, stream_path=stream)
    try:
        with StopSignals() as signals:
            engine = ENGINES.get(sc.simulation.engine)(sim, recorder)
            bar = _progress_bar(len(sim.messages), sc.simulation.time_limit) if progress else None
            t0 = time.perf_counter()
            try:
                outcome = engine.run(progress=bar.update_time if bar else None)
            finally:
                if bar:
                    bar.close()
                recorder.close()
            signals.defer()    # the run is over: a signal now must not lose the results being written
            wall = time.perf_counter() - t0
            del engine      # its working state (flows, connections, replay) is not needed for the results
            if estimate_warning:
                outcome.warnings.insert(0, estimate_warning)
            unused = sc.simulation.unused_params_warning()     # another engine's parameters, given
            if unused:
                outcome.warnings.insert(0, unused)
            result = build_result(sim, recorder, outcome, wall, __version__)
            if folder is not None:
                folder.finish(result)
    except KeyboardInterrupt:
        # interrupted before the engine could take over (its own Ctrl-C handling keeps the results)
        recorder.close()
        if folder is not None:
            folder.fail("interrupted", "interrupted before the engine started")
        raise
    except Exception as exc:
        recorder.close()
        text = " ".join(str(exc).split())
        if isinstance(exc, FabricsimError):
            reason = text
        else:
            reason = f"internal error: {type(exc).__name__}: {text}"
        if folder is not None:
            import traceback
            folder.fail("failed", reason, traceback.format_exc())
            where = (f" (results folder {folder.path}: run.json status failed; the messages finished before it "
                     f"in messages.partial.csv)")
        else:
            where = ""
        if isinstance(exc, ConfigError) or (isinstance(exc, FabricsimError) and not where):
            raise
        raise SimulationError(reason + where) from exc
    return result


class StopSignals:
    """SIGINT (Ctrl-C) and SIGTERM while a run goes on: the first stops the run as Ctrl-C always
    did (``KeyboardInterrupt`` inside the engine, which keeps what finished and marks the rest
    ``interrupted``); any further one, and any signal once the run is over (:meth:`defer`), is
    noted on stderr and otherwise ignored, so the tables and the final ``run.json`` are always
    written. The previous handlers are restored afterwards. Only in the main thread (elsewhere
    signals cannot be handled and nothing changes)."""

    _NAMES = ("SIGINT", "SIGTERM")

    def __init__(self):
        self._old = {}
        self._fired = False
        self._deferred = False

    def __enter__(self):
        import signal
        import threading
        if threading.current_thread() is threading.main_thread():
            for name in self._NAMES:
                sig = getattr(signal, name, None)
                if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:   # (ignored stays ignored)
                    self._old[sig] = signal.signal(sig, self._handle)
        return self

    def defer(self):
        self._deferred = True

    def _handle(self, signum, frame):
        import sys
        if self._fired or self._deferred:
            print("fabricsim: writing the results, please wait", file=sys.stderr, flush=True)
            return
        self._fired = True
        raise KeyboardInterrupt

    def __exit__(self, *exc):
        import signal
        for sig, old in self._old.items():
            signal.signal(sig, old)
        return False


class _progress_bar:
    """tqdm bar on stderr advanced in simulated time: shown only after a second of wall time and
    only when stderr is a terminal (``disable=None``), so logs and CI output stay clean."""

    def __init__(self, n_messages: int, limit_ps: int):
        import sys
        from tqdm import tqdm
        self._bar = tqdm(total=None, unit="us", unit_scale=False, desc="simulated", leave=False,
                         file=sys.stderr, disable=None, delay=1.0,
                         bar_format="{desc}: {n:.1f} us simulated [{elapsed}, {rate_fmt}]")
        self._last = 0

    def update_time(self, now_ps: int):
        us = now_ps / 1e6
        self._bar.update(us - self._last)
        self._last = us

    def close(self):
        self._bar.close()
