"""Compare runs: every combination of varied scenario fields, and every seed, as one tidy table.

>>> import fabricsim
>>> df = fabricsim.compare({"name": "doc", "topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 2},
...                         "traffic": {"pattern": "permutation", "message_size": "64KiB"}},
...                        vary={"routing": ["ecmp", "spray"]}, seeds=2)
>>> list(df[["routing", "seed"]].itertuples(index=False, name=None))
[('ecmp', 1), ('ecmp', 2), ('spray', 1), ('spray', 2)]
"""
from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

from .errors import ConfigError

__all__ = ["compare", "summarize", "t_critical", "ci95_halfwidth", "op_keys", "ALIASES", "DEFAULT_METRICS", "OP_METRICS"]

#: short names accepted as vary keys
ALIASES = {
    "routing": "routing.policy",
    "cc": "congestion_control.algorithm",
    "receiver": "receiver.model",
    "split": "nic.plane_split",
}

DEFAULT_METRICS = [
    "goodput_fraction", "nic_goodput_fraction", "completion_time_ratio", "slowdown_p99", "messages_over_4x",
    "goodput_while_all_active_fraction", "fct_p50_us", "fct_p99_us", "fct_max_us",
    "latency_p50_us", "latency_p99_us", "latency_p999_us",
    "drops", "retransmitted_bytes", "out_of_order_fraction", "peak_queue_bytes", "pfc_pause_events",
    "wall_time_s",
]

#: per-operation metrics, present when runs have a collectives table (summary.collectives.by_kind):
#: ``<key>_time_us``, ``<key>_algbw_gbps``, ``<key>_busbw_gbps`` for each key (a collective kind, or
#: the MoE phase dispatch / combine, or ``other``); means over the run's completed operations
OP_METRICS = {"time_us": ("time_mean_ps", 1e6), "algbw_gbps": ("algbw_mean_bps", 1e9),
              "busbw_gbps": ("busbw_mean_bps", 1e9)}

def op_keys() -> list[str]:
    """Every key ``summary.collectives.by_kind`` can have (:func:`~fabricsim.analysis.collectives.summary_key`)."""
    from .analysis.collectives import MOE_PHASES
    from .traces.schema import COLLECTIVES
    return [c for c in COLLECTIVES if c] + list(MOE_PHASES) + ["other"]


def _op_metric_pattern() -> re.Pattern:
    """``<key>_<metric>`` names of the per-operation metrics (built on first use: it reads the
    collective kinds, so importing this module stays cheap)."""
    return re.compile(r"^(" + "|".join(op_keys()) + r")_(" + "|".join(OP_METRICS) + r")$")

# two-sided 95 % Student t critical values, degrees of freedom 1..30; the normal value beyond
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def ci95_halfwidth(values) -> float:
    """95 % confidence half-width of the mean of ``values`` (Student t, :func:`t_critical`);
    NaN for fewer than two values. The one formula behind compare's table and its plots.

    >>> round(ci95_halfwidth([1.0, 2.0, 3.0]), 4)
    2.4843
    """
    import statistics
    v = [float(x) for x in values]
    return t_critical(len(v) - 1) * statistics.stdev(v) / math.sqrt(len(v)) if len(v) >= 2 else math.nan


def t_critical(dof: int) -> float:
    """Two-sided 95 % critical value of Student's t with ``dof`` degrees of freedom (1.96 beyond 30)."""
    if dof < 1:
        return math.nan
    return _T95[dof - 1] if dof <= len(_T95) else 1.960


def _us(ps):
    return None if ps is None else ps / 1e6


def op_metrics_of(summary: dict) -> dict:
    """The per-operation metrics (:data:`OP_METRICS`) of a run, one set per key of
    ``summary.collectives.by_kind`` (empty without a collectives table)."""
    out = {}
    for key, agg in summary.get("collectives", {}).get("by_kind", {}).items():
        for name, (field, scale) in OP_METRICS.items():
            v = agg.get(field)
            out[f"{key}_{name}"] = None if v is None else v / scale
    return out


def metrics_of(summary: dict) -> dict:
    """Every metric :func:`compare` can report, from a run's summary (per-operation metrics
    included when the run has them, :func:`op_metrics_of`)."""
    eb = summary["effective_bandwidth"]
    fct = summary["fct"]
    lat = summary["packet_latency"]
    has_lat = bool(lat.get("count"))
    return {**op_metrics_of(summary), **{
        "goodput_fraction": eb["goodput_fraction"],
        "nic_goodput_fraction": eb.get("nic_goodput_fraction"),
        "completion_time_ratio": eb["completion_time_ratio"],
        "slowdown_p99": summary["slowdown"]["p99"],
        "messages_over_4x": summary["slowdown"]["messages_over_4x"],
        "goodput_while_all_active_fraction": eb["goodput_while_all_active_fraction"],
        "fct_p50_us": _us(fct["p50_ps"]),
        "fct_p99_us": _us(fct["p99_ps"]),
        "fct_max_us": _us(fct["max_ps"]),
        "latency_p50_us": _us(lat["p50_ps"]) if has_lat else None,
        "latency_p99_us": _us(lat["p99_ps"]) if has_lat else None,
        "latency_p999_us": _us(lat["p999_ps"]) if has_lat else None,
        "drops": summary["drops"]["packets"],
        "retransmitted_bytes": summary.get("transport", {}).get("retransmitted_bytes"),
        "out_of_order_fraction": summary.get("transport", {}).get("out_of_order_fraction"),
        "peak_queue_bytes": summary["links"]["max_peak_queue_bytes"],
        "pfc_pause_events": summary.get("transport", {}).get("pfc_pause_events"),
        "wall_time_s": summary["run"]["wall_time_s"],
        "completed": summary["messages"]["completed"],
        "messages": summary["messages"]["total"],
        "status": summary["run"]["status"],
    }}


def _value_text(value) -> str:
    """A value as written in an override (``--set`` syntax, parsed back as YAML)."""
    return value if isinstance(value, str) else json.dumps(value)


def _item(key: str, values) -> str:
    return f"{key}={','.join(_value_text(v) for v in values)}"


def parse_vary(items) -> dict[str, list]:
    """``["routing=ecmp,spray"]`` -> ``{"routing": ["ecmp", "spray"]}`` (values parsed as YAML,
    under the limits of ``--set`` values: fabricsim/config/yaml_loader.py)."""
    from .config.yaml_loader import load_yaml_value
    out: dict[str, list] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError("expected KEY=V1,V2,...", field=f"--vary {item}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if key in out:
            raise ConfigError(f"{key} is varied twice (give all its values in one --vary)", field=f"--vary {item}")
        values = []
        for v in raw.split(","):
            v = v.strip()
            if v == "":
                raise ConfigError("empty value (allowed: a comma-separated list of values)", field=f"--vary {item}")
            values.append(load_yaml_value(v, f"--vary {item}"))
        out[key] = values
    return out


def _combo_name(keys, combo) -> str:
    parts = [f"{k}-{_value_text(v)}" for k, v in zip(keys, combo)]
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", "_".join(parts)) or "base"


def _combo_names(keys, combos) -> list[str]:
    """A folder name per combination (:func:`_combo_name`), made unique: values that differ only
    in characters a folder name cannot hold (``a b`` and ``a/b``) get a short hash each."""
    import hashlib
    names = [_combo_name(keys, c) for c in combos]
    seen: dict[str, int] = {}
    for n in names:
        seen[n] = seen.get(n, 0) + 1
    return [n if seen[n] == 1 else
            f"{n}-{hashlib.sha256(repr([_value_text(v) for v in c]).encode()).hexdigest()[:6]}"
            for n, c in zip(names, combos)]


def _plan(scenario, vary: dict, seeds, topologies: dict | None = None):
    """Validate everything -> (base LoadedScenario, keys, dotted paths, combos, seeds).

    Raises :class:`ConfigError` naming the ``--vary`` item at fault before anything runs."""
    from .api import prepare
    from .config import LoadedScenario, load_scenario
    from .config.scenario import parse_field
    from .errors import FabricsimError

    base = scenario if isinstance(scenario, LoadedScenario) else load_scenario(scenario)
    if isinstance(scenario, LoadedScenario):
        source = scenario.scenario  # re-validate from the resolved model
    else:
        source = scenario
    vary = dict(vary or {})
    keys = list(vary)
    dotted = []
    for k in keys:
        values = vary[k]
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            values = [values]
        values = list(values)
        vary[k] = values
        item = f"--vary {_item(k, values)}"
        if not isinstance(k, str) or not k or any(not p for p in k.split(".")):
            raise ConfigError("empty key in the field path", field=item)
        path = ALIASES.get(k, k)
        if path == "simulation.seed":
            raise ConfigError("vary the seed with seeds / --seeds", field=item)
        if path in dotted:
            raise ConfigError(f"{path} is varied twice", field=item)
        if not values:
            raise ConfigError("no values (allowed: one or more values)", field=item)
        texts = [_value_text(v) for v in values]
        dup = next((t for i, t in enumerate(texts) if t in texts[:i]), None)
        if dup is not None:
            raise ConfigError(f"value {dup} is given twice (allowed: distinct values)", field=item)
        dotted.append(path)
    if seeds is None:
        seed_list = [base.scenario.simulation.seed]
    elif isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ConfigError(f"{seeds} (allowed: 1 or more)", field="--seeds")
        first = base.scenario.simulation.seed
        seed_list = [first + i for i in range(seeds)]
    else:
        seed_list = list(seeds)
        if not seed_list or any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in seed_list):
            raise ConfigError(f"{seeds!r} (allowed: a count, or a list of non-negative integers)", field="--seeds")
    combos = list(itertools.product(*(vary[k] for k in keys)))
    for combo in combos:
        overrides = [f"{p}={_value_text(v)}" for p, v in zip(dotted, combo)]
        try:
            prepare(source, overrides, topologies=topologies)
        except FabricsimError as exc:
            if not isinstance(exc, ConfigError):
                raise
            culprit = None
            try:
                loc = tuple(str(x) for x in parse_field(exc.field)) if exc.field else ()
            except ValueError:
                loc = ()
            for k, p in zip(keys, dotted):
                kp = tuple(p.split("."))
                n = min(len(kp), len(loc))
                if n and loc[:n] == kp[:n]:
                    culprit = k
            if culprit is not None:
                items = f"--vary {_item(culprit, vary[culprit])}"
            else:
                items = " ".join(f"--vary {_item(k, vary[k])}" for k in keys)
            msg = re.sub(r"\s*\(from --set [^)]*\)$", "", exc.message)
            if exc.field:
                msg = f"{exc.field}: {msg}"
            raise ConfigError(msg, source=exc.source, field=items) from None
    return base, keys, dotted, combos, seed_list


def compare(scenario, vary: dict | None = None, seeds=None, output_dir: str | Path | None = None,
            metrics: list[str] | None = None, progress=None, include_incomplete: bool = False,
            jobs: int | None = None, executor=None, scheduler: str | None = None,
            topologies: dict | None = None) -> pd.DataFrame:
    """Run every combination of ``vary`` and every seed; one row per run.

    Parameters
    ----------
    scenario:
        A YAML path, dict, :class:`~fabricsim.Scenario` or loaded scenario.
    vary:
        ``{key: [values]}``; keys are dotted scenario paths or the aliases ``routing``
        (routing.policy), ``cc`` (congestion_control.algorithm), ``receiver`` (receiver.model)
        and ``split`` (nic.plane_split).
    seeds:
        A count N (the scenario's seed, +1, ... +N-1) or a list of seeds; default the scenario's seed.
    output_dir:
        If given, each run's results folder goes to ``output_dir/<combination>/seed<N>/`` and the
        table and its :func:`summarize` are written there as ``runs.csv``, ``runs.parquet`` and
        ``summary.csv``, with ``effective_bandwidth.png`` (bars per combination, error bars over
        seeds), ``report.html`` (every run, means over complete runs, a verdict) and
        ``compare.json`` (the run folders this comparison owns: a later comparison into the same
        folder removes those it does not plan, so no stale point stays).
    metrics:
        Metric columns (default :data:`DEFAULT_METRICS`, then the per-operation metrics
        (:data:`OP_METRICS`) of every kind any run has, in the order first seen; a run without
        that kind has NaN there). Per-operation names such as ``allreduce_busbw_gbps`` may be
        listed too.
    progress:
        Optional callable ``(i, n, name, seed)`` called before each run.
    include_incomplete:
        Passed to :func:`summarize` for the ``summary.csv`` written to ``output_dir``: by default
        only complete runs count in the means.
    jobs, executor, scheduler:
        Run the points on an executor of :mod:`fabricsim.sweep.executor` (``serial``,
        ``processes``, ``dask``; ``jobs`` workers, ``scheduler`` an existing Dask cluster). By
        default (no executor, ``jobs`` None or 1) they run one after the other in this process;
        ``jobs`` > 1 alone means ``processes``. The table is the same either way, rows in the
        same order (wall times aside); with an executor, ``progress`` is called as each run
        finishes (``i`` counting finished runs) rather than before it starts.
    topologies:
        Topologies already built (a dict the caller keeps, as :func:`fabricsim.api.prepare`
        takes it): the checks and the runs in this process reuse them, so each distinct
        topology section is built once (the CLI passes the one its own checks filled).

    Returns
    -------
    DataFrame
        Identity columns (one per varied key, named as given, then ``seed``), ``status`` (the
        run's status, :mod:`fabricsim.analysis.status`; ``failed`` when the run raised),
        ``reason`` (why a run failed, else empty) and metric columns. A run that fails does not
        stop the comparison: its row has status ``failed``, the reason and no metrics; Ctrl-C
        (or SIGTERM) during a run or between runs ends it: the tables hold the runs done so far
        and ``df.attrs["interrupted"]`` is True.
    Raises
    ------
    ConfigError
        A bad key or value, naming the ``--vary`` item, before anything runs.
    """
    from .api import StopSignals, run
    from .config import LoadedScenario

    add_op_metrics = metrics is None
    metrics = list(DEFAULT_METRICS if metrics is None else metrics)
    metrics = [m for m in metrics if m != "status"]   # always a column of its own
    op_metric = _op_metric_pattern()
    unknown = [m for m in metrics if m not in DEFAULT_METRICS + ["completed", "messages"]
               and not op_metric.match(m)]
    if unknown:
        raise ConfigError(f"unknown metric {unknown[0]!r} (allowed: {', '.join(DEFAULT_METRICS)}; per operation "
                          f"KEY_{{{','.join(OP_METRICS)}}} with KEY one of {', '.join(op_keys())})",
                          field="metrics")
    if topologies is None:
        topologies = {}             # each topology built once for validation and every run
    base, keys, dotted, combos, seed_list = _plan(scenario, vary or {}, seeds, topologies)
    source = scenario.scenario if isinstance(scenario, LoadedScenario) else scenario
    out = Path(output_dir) if output_dir is not None else None
    if out is not None:
        from .analysis.outpath import check_writable_dir
        check_writable_dir(out)          # below a file, unwritable: one line before any run
        _check_compare_dir(out)
    ex = None
    if executor is not None or (jobs is not None and jobs != 1):
        from .sweep.executor import make_executor
        ex = make_executor(executor, jobs=jobs, scheduler=scheduler)
        ex.start()                      # a missing extra or an unreachable scheduler: before writing
    if out is not None:
        planned = [f"{name}/seed{seed}" for name in _combo_names(keys, combos) for seed in seed_list]
        try:
            _replace_manifest(out, planned, base.scenario.name, vary or {}, seed_list)
        except BaseException:
            if ex is not None:
                ex.close(cancel=True)       # (its workers must not outlive the comparison)
            raise
    rows = []
    total = len(combos) * len(seed_list)
    i = 0
    interrupted = False
    if ex is not None:
        return _compare_on(ex, source, keys, dotted, combos, seed_list, out, metrics,
                           add_op_metrics, op_metric, progress, include_incomplete, base.scenario.name)
    with StopSignals() as signals:      # SIGTERM between runs ends the comparison as Ctrl-C does
        try:
            for combo, name in zip(combos, _combo_names(keys, combos)):
                overrides = [f"{p}={_value_text(v)}" for p, v in zip(dotted, combo)]
                for seed in seed_list:
                    i += 1
                    if progress is not None:
                        progress(i, total, name, seed)
                    run_dir = out / name / f"seed{seed}" if out is not None else None
                    row = dict(zip(keys, combo))
                    row["seed"] = seed
                    try:
                        res = run(source, output_dir=run_dir, overrides=overrides, seed=seed, topologies=topologies,
                                  overwrite=True)
                    except Exception as exc:    # noqa: BLE001 - one failing point must not abort the others
                        row.update(status="failed", reason=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                        row.update(dict.fromkeys(metrics))
                        rows.append(row)
                        continue
                    m = metrics_of(res.summary)
                    row.update(status=m["status"], reason="")
                    row.update({k: m.get(k) for k in metrics})
                    if add_op_metrics:
                        row.update(op_metrics_of(res.summary))
                    rows.append(row)
                    if m["status"] == "interrupted":
                        raise KeyboardInterrupt   # Ctrl-C stopped this run: the comparison ends here too
        except KeyboardInterrupt:       # (between runs, or a run that was interrupted): keep what ran
            interrupted = True
        signals.defer()                 # the tables below are written whatever is pressed now
        return _finish(rows, keys, metrics, add_op_metrics, out, include_incomplete, interrupted,
                       name=base.scenario.name)


def _compare_on(ex, source, keys, dotted, combos, seed_list, out, metrics, add_op_metrics,
                op_metric, progress, include_incomplete, name) -> pd.DataFrame:
    """:func:`compare`'s runs on an executor (:mod:`fabricsim.sweep.executor`): the same rows in
    the same order as the serial loop, put back in plan order as they arrive."""
    from .api import StopSignals
    from .sweep.runner import PointTask, run_point

    plan, tasks = [], []
    for combo, cname in zip(combos, _combo_names(keys, combos)):
        overrides = [f"{p}={_value_text(v)}" for p, v in zip(dotted, combo)]
        for seed in seed_list:
            run_dir = str(out / cname / f"seed{seed}") if out is not None else None
            plan.append((combo, cname, seed))
            tasks.append(PointTask(source, overrides, seed, run_dir))
    by_pos: dict[int, dict] = {}
    interrupted = False
    try:
        with StopSignals() as signals:      # SIGTERM ends the comparison as Ctrl-C does
            try:
                for pos, res in ex.imap(run_point, tasks):
                    if isinstance(res, BaseException):     # the executor lost the run (a worker died)
                        res = {"status": "failed", "reason": f"{type(res).__name__}: {' '.join(str(res).split())}",
                               "metrics": {}}
                    if res["status"] == "interrupted":
                        raise KeyboardInterrupt
                    combo, cname, seed = plan[pos]
                    if progress is not None:
                        progress(len(by_pos) + 1, len(tasks), cname, seed)
                    row = dict(zip(keys, combo))
                    row["seed"] = seed
                    row.update(status=res["status"], reason=res["reason"])
                    m = res["metrics"]
                    row.update({k: m.get(k) for k in metrics})
                    if add_op_metrics and res["status"] != "failed":
                        row.update({k: v for k, v in m.items() if op_metric.match(k)})
                    by_pos[pos] = row
            except KeyboardInterrupt:
                interrupted = True
            signals.defer()
            ex.close(cancel=interrupted)
            rows = [by_pos[i] for i in sorted(by_pos)]
            return _finish(rows, keys, metrics, add_op_metrics, out, include_incomplete, interrupted, name=name)
    finally:
        ex.close(cancel=True)


#: the comparison's own record in its output folder: the run folders it owns
MANIFEST = "compare.json"


#: a run folder of a comparison, relative to its output folder: ``<combination>/seed<N>``
_RUN_DIR = re.compile(r"^[A-Za-z0-9_=-][A-Za-z0-9._=-]*/seed-?[0-9]+$")


def _check_compare_dir(out: Path) -> None:
    """Refuse, before any run, a folder of the user's own files (:func:`check_owned_dir`)."""
    from .analysis.outpath import check_owned_dir
    check_owned_dir(out, MANIFEST, "comparison")


def _replace_manifest(out: Path, planned: list[str], name: str, vary: dict, seeds: list) -> None:
    """Record this comparison's run folders in ``out/compare.json``, first removing the run folders
    an earlier comparison into ``out`` recorded and this one does not plan (so no stale point of
    another ``--vary`` stays beside the new ones). Only entries shaped ``<combination>/seed<N>``
    inside ``out`` count, and in each only a run's own artefacts are removed
    (:func:`fabricsim.analysis.writer.remove_artefacts`), its folders too once empty; nothing else
    in ``out`` is touched."""
    from .analysis.status import RESULTS_FORMAT
    from .analysis.writer import remove_artefacts
    old = out / MANIFEST
    try:
        before = json.loads(old.read_text()).get("runs", []) if old.is_file() else []
    except (OSError, ValueError, AttributeError):
        before = []
    keep = set(planned)
    root = out.resolve()
    for rel in before if isinstance(before, list) else []:
        if not isinstance(rel, str) or rel in keep or not _RUN_DIR.match(rel):
            continue
        d = out / rel
        if root not in d.resolve().parents or not (d / "run.json").is_file():
            continue                       # (a link out of the folder, or not a run's folder)
        remove_artefacts(d)
        for folder in (d, d.parent):
            if folder != out and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    out.mkdir(parents=True, exist_ok=True)
    doc = {"results_format": RESULTS_FORMAT, "scenario": name, "vary": {k: [str(v) for v in vs] for k, vs in vary.items()},
           "seeds": list(seeds), "runs": planned}
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    tmp.replace(old)


def _finish(rows, keys, metrics, add_op_metrics, out, include_incomplete, interrupted, name: str = "") -> pd.DataFrame:
    """The table of :func:`compare`'s runs, written to ``out`` (if given) with its summary, plot and
    cross-run HTML report (``report.html``: every run, its status, means over complete runs, a verdict)."""
    import pandas as pd
    if add_op_metrics:
        op_metric = _op_metric_pattern()
        seen = dict.fromkeys(k for r in rows for k in r if op_metric.match(k) and k not in metrics)
        metrics += list(seen)
    df = pd.DataFrame(rows, columns=keys + ["seed", "status", "reason"] + metrics)
    for c in metrics:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        df.to_csv(out / "runs.csv", index=False)
        try:
            df.to_parquet(out / "runs.parquet", index=False)
        except (ImportError, ValueError):  # pragma: no cover - no parquet engine
            pass
        summarize(df, keys, include_incomplete=include_incomplete).to_csv(out / "summary.csv", index=False)
        shown = df[df["status"] != "failed"] if include_incomplete else df[df["status"] == "complete"]
        png = out / "effective_bandwidth.png"
        if len(shown):
            _write_plot(shown, keys, png)
        elif png.exists():
            png.unlink()             # (no complete run to show: no stale plot of an earlier comparison)
    df.attrs["identity"] = keys
    df.attrs["interrupted"] = interrupted
    if out is not None:
        from .analysis.report import write_compare_report
        write_compare_report(df, out / "report.html", title=f"fabricsim compare: {name}" if name else "fabricsim compare")
    return df


def _write_plot(df: pd.DataFrame, keys: list[str], path: Path) -> None:
    """Effective-bandwidth bars per combination (error bars over seeds) as a PNG."""
    import pandas as pd
    from matplotlib.figure import Figure

    from .analysis.plots import plot_effective_bandwidth
    policy = df[keys].astype(str).agg(" ".join, axis=1) if keys else pd.Series(["run"] * len(df))
    # a Figure outside pyplot: no backend switch and no stray figure in a notebook
    fig = Figure(figsize=(max(5.0, 1.2 * policy.nunique() + 2), 3.8))
    plot_effective_bandwidth(df.assign(policy=policy.values), ax=fig.subplots())
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def summarize(df: pd.DataFrame, by: list[str] | None = None, include_incomplete: bool = False) -> pd.DataFrame:
    """Mean and 95 % confidence half-width (Student t) of every metric per combination.

    ``by`` defaults to the identity columns of :func:`compare` (every column before ``seed``).
    Only runs whose ``status`` is ``complete`` count (an incomplete run's figures cover part of
    the pattern; :mod:`fabricsim.analysis.status`) unless ``include_incomplete``; failed runs
    never do. Columns: the identity columns, ``runs`` (runs averaged), ``excluded`` (runs left
    out), ``status`` (``complete``, or e.g. ``time_limit 1, failed 1`` for the excluded or
    included incomplete runs), then ``<metric>_mean`` and ``<metric>_ci95`` (NaN with a single
    run)."""
    import pandas as pd
    if by is None:
        by = df.attrs.get("identity")
        if by is None:
            cols = list(df.columns)
            by = cols[:cols.index("seed")] if "seed" in cols else []
    by = list(by)
    metric_cols = [c for c in df.columns if c not in by and c != "seed" and pd.api.types.is_numeric_dtype(df[c])]
    groups = df.groupby(by, sort=False, dropna=False) if by else [((), df)]
    rows = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(by, key))
        if "status" in g.columns:
            st = g["status"].astype(str)
            keep = (st == "complete") | ((st != "failed") & include_incomplete)
            counts = st[st != "complete"].value_counts()
            row["status"] = ", ".join(f"{k} {v}" for k, v in counts.items()) or "complete"
            row["excluded"] = int((~keep).sum())
            g = g[keep]
        row["runs"] = len(g)
        for c in metric_cols:
            v = g[c].dropna().astype(float)
            n = len(v)
            mean = float(v.mean()) if n else math.nan
            ci = ci95_halfwidth(v.tolist())
            row[f"{c}_mean"] = mean
            row[f"{c}_ci95"] = ci
        rows.append(row)
    return pd.DataFrame(rows)


def format_summary(summary: pd.DataFrame, identity: list[str]) -> str:
    """The summary as a compact text table: ``mean ± ci`` per metric."""
    metrics = [c[:-5] for c in summary.columns if c.endswith("_mean")]
    extra = [c for c in ("runs", "excluded", "status") if c in summary.columns]
    table = summary[identity + extra].copy()

    def cell(mean, ci):
        if mean is None or (isinstance(mean, float) and math.isnan(mean)):
            return "n/a"
        s = f"{mean:.4g}"
        if ci is not None and not (isinstance(ci, float) and math.isnan(ci)):
            s += f"±{ci:.2g}"
        return s

    short = {"goodput_while_all_active_fraction": "goodput_all_active", "completion_time_ratio": "completion_ratio"}
    for m in metrics:
        table[short.get(m, m)] = [cell(a, b) for a, b in zip(summary[f"{m}_mean"], summary[f"{m}_ci95"])]
    return table.to_string(index=False)


compare.summarize = summarize  # ``fabricsim.compare`` is the function; keep summarize reachable from it
