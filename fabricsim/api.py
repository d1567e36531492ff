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
        progress: "bool | Progress" = False, topologies: dict | None = None, estimate_warning: str | None = "",
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
        Show what the run is doing on stderr when it is a terminal (:class:`Progress`: the phase,
        the simulated time reached, each table written); or a :class:`Progress` already showing
        (``fabricsim run`` starts one before preparing), which this call closes when it returns.
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
    bar = progress if isinstance(progress, Progress) else Progress() if progress else None
    try:
        with StopSignals() as signals:
            if bar is not None:
                bar.phase("building the engine")
            engine = ENGINES.get(sc.simulation.engine)(sim, recorder)
            if bar is not None:
                bar.phase("simulating")
            t0 = time.perf_counter()
            try:
                outcome = engine.run(progress=bar.update_time if bar is not None else None)
            finally:
                recorder.close()
            signals.defer()    # the run is over: a signal now must not lose the results being written
            wall = time.perf_counter() - t0
            del engine      # its working state (flows, connections, replay) is not needed for the results
            if estimate_warning:
                outcome.warnings.insert(0, estimate_warning)
            unused = sc.simulation.unused_params_warning()     # another engine's parameters, given
            if unused:
                outcome.warnings.insert(0, unused)
            if bar is not None:
                bar.phase("building the results")
            result = build_result(sim, recorder, outcome, wall, __version__)
            if folder is not None:
                folder.finish(result, progress=bar.phase if bar is not None else None)
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
    finally:
        if bar is not None:
            bar.close()
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


class Progress:
    """What a run is doing, as one line on stderr: the phase (preparing, simulating with the
    simulated time reached and its pace, building the results, writing each table) and the wall
    time so far. Shown only when stderr is a terminal (tqdm's ``disable=None``) and only once the
    run has taken ``delay_s`` of wall time, so short runs, logs and CI output stay clean;
    :meth:`close` clears the line. ``fabricsim run`` makes one before it prepares the scenario and
    hands it to :func:`run` (``progress=``); ``run(progress=True)`` makes its own."""

    def __init__(self, delay_s: float = 1.0):
        import sys
        from tqdm import tqdm
        self._bar = tqdm(total=None, desc="preparing", leave=False, file=sys.stderr, disable=None,
                         delay=delay_s, bar_format="{desc} [{elapsed}]")
        self._t0 = self._phase_t0 = time.perf_counter()
        self._delay = delay_s
        self._shown = 0.0

    def phase(self, text: str) -> None:
        """Name the phase now under way (shown at once if the run is past its delay)."""
        self._bar.set_description_str(text, refresh=False)
        self._phase_t0 = time.perf_counter()
        self._show(self._phase_t0, force=True)

    def update_time(self, now_ps: int) -> None:
        """The engine reached simulated time ``now_ps`` (the line is redrawn at most 10 times a second)."""
        t = time.perf_counter()
        if t - self._shown < 0.1:
            return
        us = now_ps / 1e6
        pace = us / max(t - self._phase_t0, 1e-9)       # simulated us per wall second since the engine started
        self._bar.set_description_str(f"simulating: {us:.1f} us simulated ({pace:.3g} us/s)", refresh=False)
        self._show(t)

    def _show(self, t: float, force: bool = False) -> None:
        if t - self._t0 >= self._delay and (force or t - self._shown >= 0.1):
            self._bar.refresh()
            self._shown = t

    def clear(self) -> None:
        """Take the line off the terminal (before printing something else; the next phase redraws it)."""
        self._bar.clear()

    def close(self) -> None:
        self._bar.close()
