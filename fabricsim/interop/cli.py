"""``fabricsim interop``: exchange files with peer simulators (docs/interop.md).

Attach to the main CLI with ``main.add_command(interop)``. Exit status: 0 success, 2 bad input
(one line on stderr naming file, line and field; nothing written), 1 a simulator failure.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import ConfigError, FabricsimError

#: input extensions read as a scenario (anything else is a trace file)
SCENARIO_SUFFIXES = (".yaml", ".yml")


def _fail(exc: FabricsimError):
    click.echo("error: " + " ".join(str(exc).split()), err=True)
    sys.exit(exc.exit_code)


@click.group("interop")
def interop():
    """Import and export files of peer simulators: htsim .cm, ns-3 (HPCC) fct.txt, nccl-tests tables."""


@interop.command("cm-import")
@click.argument("cm", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--op", default=None, help="op of every message (default: the .cm file's stem)")
@click.option("--multishot", type=click.Choice(["strict", "in-order"]), default="strict", show_default=True,
              help="multishot triggers starting several connections: refuse, or pair the i-th waiting "
                   "connection with the i-th activator in file order (an approximation)")
def cm_import(cm, out, op, multishot):
    """Convert htsim connection matrix CM to trace OUT (.csv, .parquet or .jsonl)."""
    from ..traces import trace_format, write_trace
    from .htsim_cm import read_cm
    try:
        trace_format(out)
        got = read_cm(cm, op=op, multishot=multishot)
        write_trace(got.trace, out)
    except FabricsimError as exc:
        _fail(exc)
    deps = got.send_done_deps + got.recv_done_deps
    msg = (f"{cm} -> {out}: {len(got.trace)} messages on {got.nodes} nodes, {got.triggers} triggers, {deps} "
           f"dependencies ({got.send_done_deps} send_done, {got.recv_done_deps} recv_done)")
    if got.ignored:
        msg += "; not carried: " + ", ".join(f"{k} x{v}" for k, v in got.ignored.items())
    click.echo(msg)


@interop.command("cm-export")
@click.argument("source", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--nodes", type=int, default=None, help="Nodes of the matrix (default: the scenario's or "
                                                      "--topology's GPU count, else the largest GPU id + 1)")
@click.option("--topology", type=click.Path(), default=None, metavar="T",
              help="topology or scenario file whose GPU count is Nodes (trace input)")
@click.option("--set", "sets", multiple=True, metavar="KEY.PATH=VALUE", help="scenario override (scenario input)")
@click.option("--done", type=click.Choice(["send", "recv"]), default="send", show_default=True,
              help="trigger a dependency's connection activates: send_done (every htsim main) or recv_done "
                   "(fabricsim's meaning; main_eqds and main_ndp only)")
@click.option("--approximate", is_flag=True,
              help="drop start_ps / gap_ps of messages with dependencies instead of refusing them")
def cm_export(source, out, nodes, topology, sets, done, approximate):
    """Write the messages of SOURCE (a trace file, or a scenario .yaml: its generated messages)
    as htsim connection matrix OUT."""
    from .htsim_cm import write_cm
    try:
        if Path(source).suffix.lower() in SCENARIO_SUFFIXES:
            if topology is not None:
                raise ConfigError("--topology applies to a trace input (a scenario brings its topology)",
                                  field="--topology")
            from ..api import prepare
            _loaded, sim = prepare(source, overrides=sets)
            messages = sim.messages
            if nodes is None:
                nodes = sim.topology.num_hosts
        else:
            if sets:
                raise ConfigError("--set applies to a scenario input (allowed: a .yaml SOURCE)", field="--set")
            from ..traces import read_trace
            messages = read_trace(source)
            if nodes is None and topology is not None:
                from ..topology import load_topology_or_scenario
                nodes = load_topology_or_scenario(topology).num_hosts
        info = write_cm(messages, out, nodes=nodes, source=str(source), done=done, approximate=approximate)
    except FabricsimError as exc:
        _fail(exc)
    click.echo(f"{source} -> {out}: {info.connections} connections on {info.nodes} nodes, {info.triggers} triggers "
               f"({done}_done_trigger); start times in picoseconds")
    if info.dropped_start_ps or info.dropped_gap_ps:
        click.echo(f"warning: dropped start_ps of {info.dropped_start_ps} and gap_ps of {info.dropped_gap_ps} "
                   "messages with dependencies (--approximate)", err=True)
    if info.inexact_starts:
        click.echo(f"warning: {info.inexact_starts} start times are above 2**24 ps and not representable as a "
                   "32-bit float: htsim's stof rounds them", err=True)


@interop.command("fct-export")
@click.argument("results", type=click.Path())
@click.argument("out", type=click.Path())
@click.option("--dport", type=int, default=100, show_default=True,
              help="destination port of every flow (HPCC's examples: 100 normal, 200 incast)")
def fct_export(results, out, dport):
    """Write the completed messages of results folder RESULTS as an HPCC ns-3 fct.txt OUT."""
    from .ns3_fct import write_fct
    try:
        path, n, left = write_fct(results, out, dport)
    except FabricsimError as exc:
        _fail(exc)
    click.echo(f"{results} -> {path}: {n} flows (sip dip sport dport size start_ns fct_ns standalone_fct_ns)"
               + (f"; {left} incomplete messages left out" if left else ""))


@interop.command("nccl-table")
@click.argument("results", type=click.Path())
@click.option("-o", "--output", "output", type=click.Path(), default=None, help="write here instead of stdout")
@click.option("--dtype", default="float", show_default=True, help="nccl-tests data type for the count column")
@click.option("--csv", "as_csv", is_flag=True, help="one CSV row per operation instead of the text tables")
def nccl_table(results, output, dtype, as_csv):
    """Print the collectives of results folder RESULTS as nccl-tests tables (size count type redop
    root time algbw busbw)."""
    from .nccl_table import format_nccl_tables, nccl_tables
    try:
        rows, left = nccl_tables(results, dtype)
        if rows.empty:
            raise ConfigError("no completed collective of a known kind (allowed kinds: allreduce, reduce_scatter, "
                              "all_gather, all_to_all, sendrecv, broadcast)", source=str(results), field="collectives")
    except FabricsimError as exc:
        _fail(exc)
    text = rows.to_csv(index=False) if as_csv else format_nccl_tables(rows, title=str(results))
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)
    if left:
        click.echo(f"note: {left} operations left out (unknown kind or not completed)", err=True)
