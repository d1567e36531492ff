"""``fabricsim`` command line: parse, call the API, map errors to exit codes.

Exit status: 0 success (for ``run``: every message completed), 2 bad input (one line on stderr
naming file, field and what is allowed; nothing written), 1 a failure of the simulator itself,
3 a run that ended with messages not completed (``simulation.time_limit``, failed messages, a
stall), 130 an interrupted run (Ctrl-C or SIGTERM). The statuses behind them:
:mod:`fabricsim.analysis.status`.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__
from .analysis.status import EXIT_CODES_HELP, exit_code
from .analysis.outpath import check_writable_file
from .errors import ConfigError, FabricsimError
from .units import format_rate, format_time


def _fail(exc: FabricsimError, scenario: str | None = None, sets=()):
    """Print ``error: FILE[:LINE]: field.path: message`` as one line and exit with its status."""
    if scenario is not None and isinstance(exc, ConfigError):
        from .config.scenario import locate, parse_overrides
        try:
            overrides = parse_overrides(list(sets))
        except ConfigError:
            overrides = []
        locate(exc, scenario, overrides=overrides)
    click.echo("error: " + " ".join(str(exc).split()), err=True)
    sys.exit(exc.exit_code)


def _t(ps):
    return "n/a" if ps is None else format_time(ps)


def _print_summary(s: dict, out_dir):
    eb = s["effective_bandwidth"]
    m = s["messages"]
    lat = s["packet_latency"]
    nm = s.get("not_modelled") or {}
    fid = s.get("fidelity") or {}
    estimated = fid.get("estimated") or []

    def est(*keys):
        """' [estimate]' if a figure of ``keys`` (summary keys, dotted) is an estimate of the engine's model."""
        hit = any(e == k or e.startswith(k + ".") or k.startswith(e + ".") for e in estimated for k in keys)
        return "  [estimate]" if hit else ""
    from .analysis.status import describe
    status = s["run"]["status"]
    partial = status != "complete"
    only = f"  [completed messages only: {m['completed']} of {m['total']}]" if partial else ""
    unsimulated = fid.get("not_simulated") or {}
    cc = s["congestion_control"] + (" (not simulated)" if "congestion_control" in unsimulated else "")
    lines = [
        f"scenario {s['scenario']}  seed {s['seed']}  profile {s.get('profile', 'none')}  routing {s['routing']}  "
        f"cc {cc}  status {describe(status, m)}",
        f"messages      {m['completed']}/{m['total']} completed"
        + (f"  ({', '.join(f'{k}: {v}' for k, v in m['incomplete_by_reason'].items())})" if m["incomplete"] else ""),
        "effective bw  goodput {gp} = {gf} of sender line rate; completion time ideal/actual {cr}{note}".format(
            gp=format_rate(eb["goodput_bps"]),
            gf="n/a" if eb["goodput_fraction"] is None else f"{eb['goodput_fraction']:.3f}",
            cr="n/a" if eb["completion_time_ratio"] is None else f"{eb['completion_time_ratio']:.3f}",
            note=((f"  [INCOMPLETE RUN: payload delivered over the {_t(s['run']['end_ps'])} simulated, "
                   "not the pattern's]") if partial else "") + est("effective_bandwidth.goodput_bps")),
    ]
    if eb.get("nic_capacity_bps") and eb["nic_capacity_bps"] != eb.get("sender_capacity_bps"):
        # NVLink ports count in the sender line rate: the scale-out NICs' own share says more
        nf = eb.get("nic_goodput_fraction")
        lines.append(f"scale-out     NIC goodput {format_rate(eb['nic_goodput_bps'])} = "
                     f"{'n/a' if nf is None else f'{nf:.3f}'} of the hosts' NIC line rate"
                     + est("effective_bandwidth.nic_goodput_bps"))
    lines += [
        "slowdown      p99 {p99}  {n} message{pl} slower than 4x ideal{only}".format(
            p99="n/a" if s["slowdown"]["p99"] is None else f"{s['slowdown']['p99']:.2f}",
            n=s["slowdown"]["messages_over_4x"], pl="" if s["slowdown"]["messages_over_4x"] == 1 else "s",
            only=only) + est("slowdown"),
        f"message FCT   p50 {_t(s['fct']['p50_ps'])}  p99 {_t(s['fct']['p99_ps'])}  max {_t(s['fct']['max_ps'])}{only}"
        + est("fct"),
        (f"pkt latency   p50 {_t(lat['p50_ps'])}  p99 {_t(lat['p99_ps'])}  p99.9 {_t(lat['p999_ps'])}"
         f"  ({lat['count']} packets)") if "packet_latency" not in nm else
        f"pkt latency   not modelled ({nm['packet_latency']})",
        f"drops         {s['drops']['packets']} packets" if "drops" not in nm else
        f"drops         not modelled ({nm['drops']})",
        (f"run           {s['run']['events']} events in {s['run']['wall_time_s']:.2f}s"
         f" ({(s['run']['packet_hops_per_s'] or 0) / 1e6:.2f} M packet-hops/s"
         f"{', kernel ' + s['kernel'] if s.get('kernel') not in (None, 'heap') else ''})") if s.get("engine") != "flow" else
        (f"run           flow engine: {s['run'].get('flows', 0)} flows, {s['run'].get('flow_rate_recomputations', 0)} "
         f"rate recomputations in {s['run']['wall_time_s']:.2f}s"),
    ]
    if estimated:
        lines.append(f"fidelity      [estimate] = estimated by the {fid.get('engine', s.get('engine'))} engine's model: "
                     f"{fid.get('model', '').split(':')[0]} (summary.json fidelity; docs/fidelity.md)")
    if out_dir is not None:
        lines.append(f"results       {out_dir}")
    click.echo("\n".join(lines))


class _Cli(click.Group):
    """The command group, with click's own usage errors (a bad option value, an unknown option or
    command, a missing argument) as one line and exit 2 like every other bad input."""

    def main(self, *args, standalone_mode: bool = True, **kwargs):
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "fabricsim"
            click.echo(f"error: {where}: {' '.join(exc.format_message().split())} (see '{where} --help')", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(name="fabricsim", cls=_Cli, epilog=EXIT_CODES_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fabricsim")
def main():
    """fabricsim: simulate AI-cluster network fabrics (packet-level or flow-level)."""


@main.command(epilog=EXIT_CODES_HELP)
@click.argument("scenario", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="results folder (default: outputs.dir, else results/<scenario name>-<hash>: one folder per "
                   "resolved scenario, seed and --set overrides included)")
@click.option("--force", is_flag=True,
              help="write into a folder holding another scenario's results (they are replaced)")
@click.option("--seed", type=int, default=None, help="replace simulation.seed")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE",
              help="override a scenario field, e.g. --set routing.policy=adaptive (repeatable)")
@click.option("-q", "--quiet", is_flag=True, help="no progress bar and no summary")
@click.option("--json", "as_json", is_flag=True, help="print summary.json instead of the text summary")
@click.option("--report", "report", is_flag=True, help="also write RESULTS_DIR/report.html (self-contained HTML)")
def run(scenario, output, force, seed, sets, quiet, as_json, report):
    """Simulate SCENARIO and write a results folder.

    The folder is -o, else outputs.dir, else results/<scenario name>-<hash>, the hash (8 hex
    digits) naming the resolved scenario: every default, --set override and the seed. One folder
    holds one run: a rerun of the same scenario replaces every artefact (tables, report.html,
    plots/); a folder holding another scenario's results is refused (exit 2) unless --force.
    """
    from .analysis.writer import ResultsFolder, default_results_dir
    from .api import Progress, prepare, run as api_run
    out = None
    bar = None if quiet else Progress()      # a line on a terminal once the run takes a second
    try:
        if bar is not None:
            bar.phase("preparing: topology, paths, traffic")
        loaded, sim = prepare(scenario, sets, seed)  # every input error surfaces before any output
        sc = loaded.scenario
        dumped = sc.model_dump(mode="json")
        out = Path(output or sc.outputs.dir or default_results_dir(dumped, inputs=loaded.input_files()))
        ResultsFolder(out, overwrite=force).check(dumped)   # before the run: nothing written yet
        if report:
            check_writable_file(out / "report.html", field="--report")
        from .engine.estimate import long_run_warning
        slow = long_run_warning(sim)
        if slow:
            if bar is not None:
                bar.clear()
            click.echo(f"warning: {slow}", err=True)    # before it starts: the user may stop it now
        result = api_run(sim, output_dir=out, progress=bar or False, estimate_warning=slow,   # built once
                         overwrite=force)
    except FabricsimError as exc:
        if bar is not None:
            bar.close()
        _fail(exc, scenario, list(sets) + ([f"simulation.seed={seed}"] if seed is not None else []))
    except KeyboardInterrupt:
        if bar is not None:
            bar.close()
        where = f" (run.json in {out})" if out is not None and (Path(out) / "run.json").is_file() else ""
        click.echo(f"interrupted before the run started{where}", err=True)
        sys.exit(130)
    if report:
        from .analysis.report import write_report
        write_report(result, out / "report.html")
    if as_json:
        click.echo(json.dumps(result.summary, indent=2, default=str))
    elif not quiet:
        _print_summary(result.summary, out)
    for w in result.summary.get("warnings", []):
        if w != slow:
            click.echo(f"warning: {w}", err=True)
    status = result.summary["run"]["status"]
    if status == "interrupted":
        # results were written (unfinished messages marked "interrupted"); exit like Ctrl-C
        click.echo(f"interrupted: partial results in {out}", err=True)
    elif status != "complete":
        from .analysis.status import describe
        click.echo(f"warning: run incomplete, {describe(status, result.summary['messages'])}; "
                   f"figures cover completed messages only (results in {out})", err=True)
    sys.exit(exit_code(status))


@main.command()
@click.argument("scenario", type=click.Path())
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE")
def validate(scenario, sets):
    """Check SCENARIO (and its topology and traffic) without running it."""
    from .api import prepare
    try:
        loaded, sim = prepare(scenario, sets)
    except FabricsimError as exc:
        _fail(exc, scenario, sets)
    t = sim.topology
    click.echo(f"{scenario}: ok ({t.num_hosts} hosts, {len(t.switches)} switches, {len(sim.messages)} messages, "
               f"routing {loaded.scenario.routing.name})")


@main.command("compare")
@click.argument("scenario", type=click.Path())
@click.option("--vary", "vary", multiple=True, required=True, metavar="KEY=V1,V2",
              help="a field and its values (aliases: routing, cc, receiver, split; or a dotted path), repeatable")
@click.option("--seeds", type=int, default=1, show_default=True,
              help="runs per combination: the scenario's seed, +1, ...")
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="folder (default: results/<scenario name>-compare)")
@click.option("-q", "--quiet", is_flag=True, help="no progress lines and no table")
@click.option("--include-incomplete", "include_incomplete", is_flag=True,
              help="count runs that did not complete every message (time limit, failed messages) in the means "
                   "(default: only complete runs; failed runs never)")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="runs at once (default 1, one after the other; more: on --executor, default processes)")
@click.option("--executor", "executor", default=None, metavar="NAME",
              help="where the runs go: serial, processes (standard library), dask (pip install 'fabricsim[dask]'), "
                   "or a plug-in's; docs/sweeps.md")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="an existing Dask scheduler (implies --executor dask)")
def compare_cmd(scenario, vary, seeds, output, quiet, include_incomplete, jobs, executor, scheduler):
    """Run SCENARIO for every combination of --vary values and every seed; print mean ± 95 % CI.

    Each run's status is a column of runs.csv; by default only complete runs count in the means
    (summary.csv, the table), the others are counted as excluded. A run that fails is recorded
    (status failed and the reason) and the comparison goes on. Exit 0 when every run completed,
    3 when some run did not (1 when every run failed), 130 when interrupted."""
    from .compare import _plan, compare, format_summary, parse_vary, summarize
    from .config import load_scenario
    try:
        loaded = load_scenario(scenario)
    except FabricsimError as exc:
        _fail(exc, scenario)
    try:
        if seeds < 1:
            raise ConfigError(f"{seeds} (allowed: 1 or more)", field="--seeds")
        varied = parse_vary(vary)
        topologies: dict = {}           # built once: for the checks and then for every run
        _plan(scenario, varied, seeds, topologies)  # every combination checked before anything is written
        out = Path(output or Path("results") / f"{loaded.scenario.name}-compare")
        from .analysis.outpath import check_writable_dir
        check_writable_dir(out)
        from .compare import _check_compare_dir
        _check_compare_dir(out)        # a folder of the user's own files: refused before any run

        def progress(i, n, name, seed):
            if not quiet:
                click.echo(f"[{i}/{n}] {name} seed {seed}", err=True)

        if scheduler is not None and executor not in (None, "dask"):
            raise ConfigError(f"--scheduler needs --executor dask (got {executor})", field="--scheduler")
        df = compare(scenario, varied, seeds=seeds, output_dir=out, progress=progress,
                     include_incomplete=include_incomplete, jobs=jobs, executor=executor, scheduler=scheduler,
                     topologies=topologies)
    except FabricsimError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        click.echo(f"interrupted between two runs: the finished runs are in {out}", err=True)
        sys.exit(130)
    if not quiet:
        click.echo(format_summary(summarize(df, list(varied), include_incomplete=include_incomplete), list(varied)))
        click.echo(f"results       {out}  (runs.csv, summary.csv, report.html, one folder per run)")
    bad = df[df["status"] != "complete"]
    for row in bad.to_dict("records"):
        point = " ".join(f"{k}={row[k]}" for k in varied)
        why = f": {row['reason']}" if row["reason"] else ""
        click.echo(f"warning: {point} seed {row['seed']}: {row['status']}{why}", err=True)
    if df.attrs.get("interrupted"):
        click.echo(f"interrupted: the runs done so far are in {out}", err=True)
        sys.exit(130)
    if len(bad):
        sys.exit(1 if (bad["status"] == "failed").all() and len(bad) == len(df) else 3)


@main.command("sweep")
@click.argument("sweep_file", metavar="SWEEP.yaml", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="results folder (default: results/<sweep name>-sweep); an existing one is resumed")
@click.option("--executor", "executor", default=None, metavar="NAME",
              help="where the points run: serial, processes (the default), dask (the default with --scheduler), "
                   "or a plug-in's")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None,
              help="workers (default: the CPU count; for a Dask LocalCluster, its worker processes)")
@click.option("--scheduler", default=None, metavar="tcp://HOST:PORT",
              help="an existing Dask scheduler (implies --executor dask; its workers need fabricsim and the files)")
@click.option("--keep-runs", "keep_runs", is_flag=True, help="also keep each point's results folder (DIR/runs/<id>/)")
@click.option("--retry-failed", "retry_failed", is_flag=True, help="run the points recorded as failed again")
@click.option("--include-incomplete", "include_incomplete", is_flag=True,
              help="count incomplete runs in the summary's means (default: complete runs only)")
@click.option("--check", "check_only", is_flag=True,
              help="validate every point and say how many would run; run nothing and write nothing")
@click.option("-q", "--quiet", is_flag=True, help="no progress and no table")
def sweep_cmd(sweep_file, output, executor, jobs, scheduler, keep_runs, retry_failed, include_incomplete, check_only,
              quiet):
    """Run every point of SWEEP.yaml (a base scenario x a grid of overrides x seeds).

    Results: DIR/points/ (a Parquet dataset, one row per point, partitioned by status),
    points.csv, summary.csv (mean ± 95 % CI per combination) and sweep.json. A rerun into the
    same folder runs only the points not finished (by a hash of each resolved point). A point
    that fails is recorded and the others go on; Ctrl-C keeps the finished points. Exit 0 when
    every point completed, 3 when some did not (1 when every point failed), 130 when interrupted.
    The file format: docs/sweeps.md."""
    import time

    from .sweep.runner import run_sweep
    from .sweep.spec import load_spec
    try:
        if scheduler is not None and executor not in (None, "dask"):
            raise ConfigError(f"--scheduler needs --executor dask (got {executor})", field="--scheduler")
        spec = load_spec(sweep_file)
        if check_only:
            from .sweep.runner import check
            from .sweep.store import SweepStore
            points = check(spec)
            out = Path(output) if output is not None else Path("results") / f"{spec.name}-sweep"
            done = SweepStore(out, {}).finished()
            if retry_failed:
                done = {k: v for k, v in done.items() if v != "failed"}
            todo = sum(1 for p in points if p.point_id not in done)
            combos = len({p.positions for p in points})
            click.echo(f"{sweep_file}: ok ({len(points)} points: {combos} combinations x {len(points) // combos} "
                       f"seeds; {len(points) - todo} done in {out}, {todo} to run)")
            return
        last = [0.0]

        def progress(p):
            now = time.monotonic()
            if not quiet and (now - last[0] >= 1.0 or p.remaining + p.running == 0):
                last[0] = now
                click.echo(p.line(), err=True)

        res = run_sweep(spec, output, executor=executor, jobs=jobs, scheduler=scheduler, keep_runs=keep_runs,
                        retry_failed=retry_failed, include_incomplete=include_incomplete, progress=progress)
    except FabricsimError as exc:
        _fail(exc)
    out = res.output_dir
    if not quiet:
        from .compare import format_summary
        if len(res.summary):
            click.echo(format_summary(res.summary, res.keys))
        click.echo(f"results       {out}  (points/, points.csv, summary.csv, sweep.json)  "
                   f"{res.ran} run, {res.skipped} done before")
    df = res.table
    bad = df[df["status"] != "complete"]
    for row in bad.to_dict("records"):
        point = " ".join(f"{k}={row[k]}" for k in res.keys)
        why = f": {row['reason']}" if row["reason"] else ""
        click.echo(f"warning: {point} seed {row['seed']}: {row['status']}{why}", err=True)
    if res.interrupted:
        click.echo(f"interrupted: {len(df)} of {res.total} points are in {out}; run the same command to resume",
                   err=True)
        sys.exit(130)
    if len(bad):
        sys.exit(1 if (bad["status"] == "failed").all() and len(bad) == len(df) else 3)


@main.command("plan")
@click.argument("plan_file", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default=None,
              help="folder (default: results/<plan name>-plan)")
@click.option("--seed", type=int, default=None, help="replace the plan's seed")
@click.option("-q", "--quiet", is_flag=True, help="no progress lines and no table")
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON instead of the table")
def plan_cmd(plan_file, output, seed, quiet, as_json):
    """Capacity planning: step time, tokens/s/GPU and scaling efficiency of PLAN_FILE's training job on
    each of its cluster sizes, from the fabric's simulated communication (docs/planning.md).

    Writes plan.csv, plan.json (and plan.parquet if asked), patterns.csv and scaling.png into the
    output folder; every assumption is written beside the numbers. Exit 2 on a bad plan (nothing
    written), 1 when a pattern's simulation fails."""
    from .plan import output as plan_output
    from .plan.runner import run_plan
    from .plan.spec import load_plan
    try:
        spec, source = load_plan(plan_file)
        if seed is not None:
            if seed < 0:
                raise ConfigError(f"got {seed} (allowed: >= 0)", field="--seed")
            spec = spec.model_copy(update={"seed": seed})
        out = Path(output or Path("results") / f"{spec.name}-plan")
        from .analysis.outpath import check_owned_dir
        check_owned_dir(out, "plan.json", "plan")     # a folder of the user's own files: refused

        def progress(text):
            if not quiet:
                click.echo(text, err=True)

        result = run_plan(spec, source, progress=progress)
        plan_output.write(result, out, spec.outputs.formats)
    except FabricsimError as exc:
        _fail(exc, plan_file)       # errors found after validation get the line of their field
    except KeyboardInterrupt:
        click.echo("interrupted: nothing written (the results are written once every size is planned)", err=True)
        sys.exit(130)
    if as_json:
        click.echo(json.dumps(plan_output.json_safe(result.rows), indent=1))
    elif not quiet:
        click.echo(plan_output.format_table(result))
        click.echo(f"simulated     {result.simulations} distinct patterns")
        if spec.background is not None:
            click.echo(f"background    {spec.background.pattern} at load {spec.background.load:g} beside every "
                       f"pattern ({', '.join(str(r['background_gpus']) for r in result.rows)} GPUs per size)")
        ratios = [p["packet_ratio"] for p in result.patterns if p.get("packet_ratio") == p.get("packet_ratio")
                  and "packet_ratio" in p]
        if ratios:
            click.echo(f"packet check  {len(ratios)} patterns, packet/flow {min(ratios):.3g}..{max(ratios):.3g} "
                       f"(use: {spec.fabric.packet_slice.use})")
        click.echo(f"results       {out}  (plan.csv, plan.json, patterns.csv, scaling.png)")


@main.group("profile")
def profile_group():
    """Deployment profiles (profile: NAME in a scenario)."""


@profile_group.command("list")
def profile_list():
    """Name and one-line summary of every profile."""
    from .config.profiles import PROFILES
    for name in PROFILES.names():
        click.echo(f"{name:12s} {PROFILES.get(name).summary}")


@profile_group.command("show")
@click.argument("name")
def profile_show(name):
    """The settings profile NAME expands to, with every default filled in (YAML)."""
    import yaml
    from .config.profiles import PROFILES
    from .config.scenario import load_scenario
    if name not in PROFILES:
        _fail(ConfigError(PROFILES.unknown_message(name), field="profile"))
    full = load_scenario({"profile": name}).scenario.model_dump(mode="json")
    shown = {k: full[k] for k in ("profile", "routing", "receiver", "congestion_control", "nic", "switch")}
    click.echo(yaml.safe_dump(shown, sort_keys=False).rstrip())


@main.command("schema")
@click.argument("kind", type=click.Choice(["scenario", "topology"]), default="scenario")
def schema_cmd(kind):
    """Print the JSON Schema (draft 2020-12) of a scenario file (default) or a topology file.

    Built from the config models and the registries, so every registered routing policy,
    receiver, congestion control and engine (plug-ins included) is there with its parameters.
    Editors take it for completion and checks, e.g. a YAML language server's
    ``# yaml-language-server: $schema=scenario.schema.json`` after
    ``fabricsim schema > scenario.schema.json``."""
    from .config.jsonschema import schema_text
    click.echo(schema_text(kind), nl=False)


@main.group()
def topo():
    """Inspect topologies: the shipped presets and any topology or scenario file."""


@topo.command("list")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def topo_list(as_json):
    """The topology presets shipped with fabricsim: use one as ``topology: {preset: NAME}``."""
    from .topology.catalog import preset_description, preset_names, preset_summary
    if as_json:
        click.echo(json.dumps({n: {"summary": preset_summary(n), "description": preset_description(n)}
                              for n in preset_names()}, indent=2))
        return
    width = max(len(n) for n in preset_names())
    for name in preset_names():
        click.echo(f"{name:<{width}}  {preset_summary(name)}")


@topo.command("show")
@click.argument("file", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
@click.option("--draw", "draw", type=click.Path(dir_okay=False), default=None, metavar="PNG",
              help="also draw the topology (small instances) to this PNG file")
def topo_show(file, as_json, draw):
    """Print node and link counts per tier, bisection bandwidth (per plane for clusters) of a
    topology (or scenario) FILE or of a preset named FILE (``fabricsim topo list``); optionally
    draw it."""
    from .topology import load_topology_or_scenario
    from .topology.catalog import preset_names, preset_path
    try:
        if not Path(file).exists() and file in preset_names():
            file = str(preset_path(file))
        t = load_topology_or_scenario(file)
        d = t.describe()
        if draw:
            from .topology.draw import draw_topology
            draw_topology(t, draw)
    except FabricsimError as exc:
        _fail(exc, file)
    if as_json:
        click.echo(json.dumps(d, indent=2, default=str))
        return
    click.echo(f"topology      {d['name']}")
    click.echo(f"nodes         {d['nodes']}  (" + ", ".join(f"{k}: {v}" for k, v in d["nodes_per_tier"].items()) + ")")
    click.echo(f"links         {d['links']}  (" + ", ".join(f"{k}: {v}" for k, v in d["links_per_kind"].items()) + ")")
    click.echo(f"link rates    {', '.join(format_rate(r) for r in d['link_rates_bps'])}")
    click.echo(f"bisection     {format_rate(d['bisection_bps'])}")
    if d.get("oversubscription") is not None:
        click.echo(f"oversubscr.   {d['oversubscription']:g}:1")
    if d.get("gpus") is not None:
        unit = d["domain_unit"]
        click.echo(f"gpus          {d['gpus']} in {d['domains']} {unit} ({d['domain']}, up to {d['gpus_per_domain']} "
                   f"per {unit[:-1]})")
    nv = d.get("nvlink")
    if nv:
        click.echo(f"nvlink        {nv['model']}: {nv['switches_per_domain']} per domain, "
                   f"{format_rate(nv['bandwidth_bps'])} per GPU per direction"
                   + (f"; rack bisection {format_rate(d['nvlink_bisection_bps'])}" if "nvlink_bisection_bps" in d else ""))
    if d.get("planes"):
        click.echo(f"scale-out     {d['nic']} per GPU = {d['planes']} planes, {d['rails']} rails, {d['tiers']} tiers, "
                   f"radix {d['radix']}")
        for row in d["per_plane"]:
            if row.get("failed"):
                click.echo(f"plane {row['plane']:<7} failed")
                continue
            tiers = f"leaves {row['leaves']}, spines {row['spines']}"
            if row["superspines"]:
                tiers += f", super-spines {row['superspines']}"
            click.echo(f"plane {row['plane']:<7} {tiers}; bisection {format_rate(row['bisection_bps'])}"
                       + ("  (degraded)" if row.get("degraded") else ""))
    if draw:
        click.echo(f"drawing       {draw}")


@main.group("trace")
def trace_group():
    """Inspect, validate and convert message traces (format v1, docs/traces.md)."""


def _trace_topology_hosts(path) -> int:
    """Number of GPUs (hosts) of a topology YAML file or of a scenario's topology."""
    from .topology import load_topology_or_scenario
    return load_topology_or_scenario(path).num_hosts


@trace_group.command("inspect")
@click.argument("file", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="machine-readable output")
def trace_inspect(file, as_json):
    """Summarise trace FILE: counts, bytes per operation and phase, traffic matrix, skew, depth."""
    from .traces import inspect_trace, read_trace
    from .units import format_size
    try:
        d = inspect_trace(read_trace(file))
    except FabricsimError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    tm = d["traffic_matrix"]
    b = lambda x: f"{format_size(int(round(x)))}"  # noqa: E731
    click.echo(f"trace         {d['file']}  (format v{d['format_version']})")
    click.echo(f"messages      {d['messages']}  ({d['messages_with_deps']} with deps, "
               f"{d['dependency_edges']} dependency edges, depth {d['dependency_depth']})")
    click.echo(f"bytes         {d['total_bytes']} ({b(d['total_bytes'])})")
    click.echo(f"gpus          {d['gpus']}  ops {d['ops']}  layers {d['layers']}  microbatches {d['microbatches']}")
    click.echo("per phase     " + ", ".join(f"{k}: {v['messages']} msgs {b(v['bytes'])}"
                                             for k, v in d["bytes_per_phase"].items()))
    ops = list(d["bytes_per_op"].items())
    for k, v in ops[:20]:
        click.echo(f"op {k:<10} {v['messages']} msgs {b(v['bytes'])}")
    if len(ops) > 20:
        click.echo(f"... {len(ops) - 20} more ops (--json lists all)")
    click.echo(f"pairs         {tm['pairs']}  bytes per pair max {b(tm['pair_bytes_max'])} mean {b(tm['pair_bytes_mean'])}")
    click.echo(f"per-GPU send  max {b(tm['send_bytes_max'])} mean {b(tm['send_bytes_mean'])}")
    click.echo(f"per-GPU recv  max {b(tm['recv_bytes_max'])} mean {b(tm['recv_bytes_mean'])}  skew "
               + ("n/a" if tm["recv_skew"] is None else f"{tm['recv_skew']:.3f}"))
    ri = d["dispatch_rank_imbalance"]
    if ri["ops"]:
        click.echo(f"dispatch rank imbalance  max / mean - 1 of bytes received per GPU of a dispatch op: "
                   f"mean {ri['mean']:.3f} max {ri['max']:.3f} over {ri['ops']} ops")


@trace_group.command("validate")
@click.argument("file", type=click.Path())
@click.option("--topology", "topology", type=click.Path(), default=None, metavar="T",
              help="also check GPU ids against a topology YAML file or a scenario's topology")
def trace_validate(file, topology):
    """Check trace FILE (ids, sizes, phases, dependencies, cycles, GPU ids); exit 2 on the first error."""
    from .traces import read_trace
    try:
        hosts = _trace_topology_hosts(topology) if topology else None
        t = read_trace(file, num_hosts=hosts)
    except FabricsimError as exc:
        _fail(exc)
    click.echo(f"{file}: ok ({len(t)} messages" + (f", GPUs within {hosts} hosts" if hosts else "") + ")")


@trace_group.command("convert")
@click.argument("src", type=click.Path())
@click.argument("dst", type=click.Path())
def trace_convert(src, dst):
    """Convert trace SRC to DST; formats by extension (.parquet, .csv, .jsonl)."""
    from .traces import read_trace, trace_format, write_trace
    try:
        trace_format(dst)
        check_writable_file(dst, field="DST")
        t = read_trace(src)
        write_trace(t, dst)
    except FabricsimError as exc:
        _fail(exc)
    click.echo(f"{src} -> {dst}: {len(t)} messages")


#: CLI option -> MoeTraceConfig field
_MOE_OPTIONS = {"preset": "model", "gpus": "gpus", "ep_size": "ep_size", "gpus_per_node": "gpus_per_node",
                "tokens_per_gpu": "tokens_per_gpu", "layers": "layers", "microbatches": "microbatches",
                "max_nodes": "max_nodes_per_token", "seed": "seed", "dispatch": "dispatch", "passes": "passes",
                "overlap": "overlap", "send_order": "send_order", "copies": "copies", "connections": "connections",
                "forward_chunk": "forward_chunk_bytes"}


@trace_group.command("moe")
@click.option("-o", "--output", "output", type=click.Path(), required=True, metavar="OUT",
              help="trace file to write (.parquet, .csv, .jsonl)")
@click.option("--config", "config_file", type=click.Path(), default=None, metavar="FILE.yaml",
              help="YAML mapping of MoeTraceConfig fields (options given here override it)")
@click.option("--preset", type=str, default=None, help="deepseek-v3 | gpt-oss-20b | custom")
@click.option("--gpus", type=int, default=None, help="total GPUs (default: ep-size)")
@click.option("--ep-size", "ep_size", type=int, default=None, help="GPUs per expert-parallel group")
@click.option("--gpus-per-node", "gpus_per_node", type=int, default=None,
              help="GPUs per node for node-limited routing (default 8; 72 for NVL72)")
@click.option("--tokens-per-gpu", "tokens_per_gpu", type=int, default=None)
@click.option("--layers", type=int, default=None)
@click.option("--microbatches", type=int, default=None)
@click.option("--zipf", type=float, default=None, metavar="S", help="Zipf(S) expert popularity")
@click.option("--imbalance", type=float, default=None, metavar="R",
              help="expert popularity tuned to (max - mean) / mean = R tokens per expert")
@click.option("--max-nodes", "max_nodes", type=int, default=None, metavar="M",
              help="node-limited routing: at most M nodes per token (0: unlimited)")
@click.option("--dispatch", type=str, default=None,
              help="flat (default) | hierarchical: once per node over scale-out, then NVLink forwarding")
@click.option("--passes", type=str, default=None, help="forward (default) | forward_backward")
@click.option("--overlap", type=str, default=None,
              help="none (default) | a2a_1f1b: one microbatch's all-to-all overlaps another's compute")
@click.option("--rank-imbalance", "rank_imbalance", type=float, default=None, metavar="R",
              help="expert popularity tuned to per-rank imbalance max / mean - 1 = R of copies received per rank")
@click.option("--send-order", "send_order", type=str, default=None,
              help="staggered (default: NCCL / DeepEP internode) | random | ascending")
@click.option("--copies", type=str, default=None,
              help="per_gpu (default: DeepEP normal kernels) | per_expert (DeepEP low-latency kernels)")
@click.option("--connections", type=str, default=None, help="persistent (default: conn 0) | per_message (conn -1)")
@click.option("--forward-chunk", "forward_chunk", type=str, default=None, metavar="SIZE",
              help="hierarchical: scale-out chunk forwarded over NVLink as it arrives (default 64KiB; 0: store and forward)")
@click.option("--seed", type=int, default=None)
@click.option("--json", "as_json", is_flag=True, help="print the summary as JSON")
def trace_moe(output, config_file, zipf, imbalance, rank_imbalance, as_json, **opts):
    """Generate an MoE dispatch / combine trace (docs/traces.md, "Generating MoE traces")."""
    from .traces import trace_format, write_trace
    from .traces.moe import format_summary, generate_moe_trace, load_moe_config
    try:
        trace_format(output)
        check_writable_file(output)
        data, root, source = {}, None, None
        if config_file is not None:
            from .config.scenario import load_yaml
            data, root = load_yaml(config_file)
            source = str(config_file)
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise ConfigError("expected a mapping of MoeTraceConfig fields", source=source)
        given = {}
        for opt, fld in _MOE_OPTIONS.items():
            if opts.get(opt) is not None:
                given[fld] = "--" + opt.replace("_", "-")
                data[fld] = opts[opt]
        if data.get("max_nodes_per_token") == 0 and "max_nodes_per_token" in given:
            data["max_nodes_per_token"] = None
        chosen = [o for o, v in (("--zipf", zipf), ("--imbalance", imbalance), ("--rank-imbalance", rank_imbalance))
                  if v is not None]
        if len(chosen) > 1:
            raise ConfigError(f"give one of --zipf, --imbalance, --rank-imbalance, not {' and '.join(chosen)}",
                              field=chosen[-1])
        if zipf is not None:
            data.update(popularity="zipf", zipf_s=zipf)
            given.update(popularity="--zipf", zipf_s="--zipf")
        if imbalance is not None:
            data.update(popularity="imbalance", imbalance=imbalance)
            given.update(popularity="--imbalance", imbalance="--imbalance")
        if rank_imbalance is not None:
            data.update(popularity="rank_imbalance", rank_imbalance=rank_imbalance)
            given.update(popularity="--rank-imbalance", rank_imbalance="--rank-imbalance")
        try:
            cfg = load_moe_config(data, source, root)
        except ConfigError as exc:
            top = (exc.field or "").split(".")[0].split("[")[0]
            if top in given:
                exc = ConfigError(exc.message, field=given[top])
            elif source is None and exc.source is None:
                exc = ConfigError(exc.message, field=f"--{top.replace('_', '-')}" if top else None)
            raise exc
        try:
            gen = generate_moe_trace(cfg)
        except ConfigError as exc:
            if exc.field in given:
                exc = ConfigError(exc.message, field=given[exc.field])
            raise exc
        write_trace(gen.trace, output)
    except FabricsimError as exc:
        _fail(exc)
    d = gen.summary()
    if as_json:
        click.echo(json.dumps(dict(d, output=str(output)), indent=2))
    else:
        click.echo(format_summary(d, output))


@trace_group.command("collective")
@click.option("-o", "--output", "output", type=click.Path(), required=True, metavar="OUT",
              help="trace file to write (.parquet, .csv, .jsonl)")
@click.option("--kind", type=str, required=True, help="allreduce | reduce_scatter | all_gather | all_to_all | sendrecv")
@click.option("--ranks", type=str, required=True, help="GPU ids in ring order: ranges and comma lists (0-7, 0,2,4-6)")
@click.option("--size", type=str, required=True, help="bytes per collective (e.g. 64MiB)")
@click.option("--gap", type=str, default="0", help="compute time per dependent step (e.g. 2us)")
@click.option("--repeat", type=int, default=1, help="back-to-back collectives, each waiting for the previous one")
@click.option("--op", "op", type=str, default=None, help="op name (default: the kind)")
@click.option("--channels", type=int, default=1,
              help="NCCL channels: the buffer is split over them, each runs its own ring on its own connection")
@click.option("--conn-base", "conn_base", type=int, default=0,
              help="connection of channel 0 (channel c: conn-base + c); -1 = fresh queue pairs per message")
@click.option("--algorithm", type=str, default="ring", help="allreduce: ring | tree (NCCL double binary tree)")
@click.option("--tree-chunk", "tree_chunk", type=str, default="512KiB", help="tree: pipeline chunk size")
def trace_collective(output, kind, ranks, size, gap, repeat, op, channels, conn_base, algorithm, tree_chunk):
    """Generate a collective expanded to point-to-point messages (docs/traces.md, "Collectives")."""
    from .traces import trace_format, write_trace
    from .traces.collectives import KINDS, check_size, compose, parse_ranks, sequence
    from .units import format_size, parse_size, parse_time
    try:
        trace_format(output)
        check_writable_file(output)
        if kind not in KINDS:
            raise ConfigError(f"unknown collective {kind!r} (allowed: {', '.join(KINDS)})", field="--kind")
        rank_list = parse_ranks(ranks)
        check_size(kind, len(rank_list), 0, repeat, channels, "ring", 1)   # (size-free bound first)
        try:
            size_b = parse_size(size)
        except ValueError as exc:
            raise ConfigError(str(exc), field="--size") from None
        try:
            gap_ps = parse_time(gap)
        except ValueError as exc:
            raise ConfigError(str(exc), field="--gap") from None
        try:
            chunk_b = parse_size(tree_chunk)
        except ValueError as exc:
            raise ConfigError(str(exc), field="--tree-chunk") from None
        try:
            trace = compose([sequence(kind, rank_list, size_b, repeat=repeat, op=op, gap_ps=gap_ps,
                                      channels=channels, conn_base=conn_base, algorithm=algorithm,
                                      chunk_bytes=chunk_b)], source=str(output))
        except ConfigError as exc:
            if exc.field and not exc.field.startswith("--"):
                exc = ConfigError(exc.message, field="--" + {"chunk": "tree-chunk"}.get(exc.field, exc.field))
            raise exc
        write_trace(trace, output)
    except FabricsimError as exc:
        _fail(exc)
    total = sum(r.size_bytes for r in trace.records)
    conns = (f"connections {conn_base}..{conn_base + channels - 1}" if conn_base >= 0
             else "fresh queue pairs per message")
    algo = f" ({algorithm})" if kind in ("allreduce", "reduce_scatter", "all_gather") else ""
    click.echo(f"{output}: {kind}{algo} x{repeat} over {len(rank_list)} ranks, {channels} channel(s) ({conns}), "
               f"{len(trace)} messages, {total} B ({format_size(total)}) sent")


@trace_group.command("import-chakra")
@click.argument("et_path", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), required=True, metavar="OUT",
              help="trace file to write (.parquet, .csv, .jsonl)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable summary")
def trace_import_chakra(et_path, output, as_json):
    """Import MLCommons Chakra ET files (one per rank: a directory, a prefix or a glob such as
    DIR/et.*.et) into a trace (docs/traces.md, "Chakra import"; needs the chakra extra)."""
    import warnings as _warnings
    from .traces import trace_format, write_trace
    from .traces.chakra import format_summary, import_chakra
    try:
        trace_format(output)
        check_writable_file(output)
        with _warnings.catch_warnings():
            _warnings.simplefilter("ignore")  # reported in the summary instead
            imp = import_chakra(et_path)
        write_trace(imp.trace, output)
    except FabricsimError as exc:
        _fail(exc)
    if as_json:
        click.echo(json.dumps(dict(imp.summary(), output=str(output)), indent=2))
    else:
        click.echo(format_summary(imp, output))


@main.command("plot")
@click.argument("results_dir", type=click.Path())
def plot_cmd(results_dir):
    """Write the plots of the results folder RESULTS_DIR as PNG files into RESULTS_DIR/plots/."""
    from .analysis.load import load_results
    from .analysis.plots import write_plots
    from .analysis.outpath import check_writable_dir
    try:
        check_writable_dir(Path(results_dir) / "plots", field="RESULTS_DIR/plots")
        result = load_results(results_dir)
    except FabricsimError as exc:
        _fail(exc)
    for p in write_plots(result, Path(results_dir) / "plots"):
        click.echo(str(p))


@main.command("report")
@click.argument("results_dir", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write (default: RESULTS_DIR/report.html)")
def report_cmd(results_dir, output):
    """Write one self-contained HTML report (scenario, summary, plots, definitions) of RESULTS_DIR."""
    from .analysis.load import load_results
    from .analysis.report import write_report
    target = Path(output) if output else Path(results_dir) / "report.html"
    try:
        check_writable_file(target, field="--output" if output else "RESULTS_DIR/report.html")
        result = load_results(results_dir)
    except FabricsimError as exc:
        _fail(exc)
    click.echo(str(write_report(result, target)))


def _attach_groups():
    # command groups that live beside the code they drive (one noun per module)
    from .interop.cli import interop
    main.add_command(interop)


_attach_groups()


if __name__ == "__main__":  # pragma: no cover
    main()
