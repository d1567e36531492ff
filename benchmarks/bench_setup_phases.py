"""Time the set-up outside the flow engine's event loop on a trace run (benchmarks/README.md,
"Set-up outside the flow engine's loop").

Phases timed one after the other in this process (wall clock, ``time.perf_counter``): parsing and
checking the trace, building the topology, the link table, the replay's dependents CSR and
connection numbers, ``prepare``, the ideal FCTs and the lower bound (``LowerBound`` and its
``of``). With ``--profile-run`` it then runs the whole scenario under cProfile and prints the
cumulative time of each phase inside the run, ``build_result`` included::

    taskset -c 1 python3 benchmarks/bench_setup_phases.py --trace T.parquet --topology gb300_8192_4x200g
    taskset -c 1 python3 benchmarks/bench_setup_phases.py --trace T.parquet --profile-run

Run it with ``PYTHONPATH`` set to the tree to measure (a checkout of the code before, then this).
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: phases of a profiled run: label -> (file name, function name)
RUN_PHASES = {
    "prepare": ("api.py", "prepare"), "read_trace": ("io.py", "read_trace"),
    "check_trace": ("schema.py", "check_trace"), "build_cluster_from": ("cluster.py", "build_cluster_from"),
    "FlowEngine.__init__": ("flow.py", "__init__"), "LinkTable.__init__": ("links.py", "__init__"),
    "Replay/Connections.__init__": ("replay.py", "__init__"), "engine run": ("flow.py", "run"),
    "build_result": ("result.py", "build_result"), "LowerBound.__init__": ("bound.py", "__init__"),
    "LowerBound.of": ("bound.py", "of"), "collectives_table": ("collectives.py", "collectives_table"),
    "add_tag_columns": ("collectives.py", "add_tag_columns"),
}


def scenario(trace: str, topology: str) -> dict:
    return {"name": "setup_phases", "topology": {"preset": topology},
            "traffic": {"pattern": "trace", "path": trace}, "routing": {"policy": "ecmp"},
            "simulation": {"engine": "flow", "time_limit": "1s", "flow": {"group": 0.01, "releases": "grouped"}},
            "outputs": {"link_sample_interval": "off"}}


def phases(trace: str, topology: str) -> dict:
    from fabricsim.analysis.bound import LowerBound
    from fabricsim.api import prepare
    from fabricsim.flows.links import LinkTable
    from fabricsim.flows.replay import Connections, Replay
    from fabricsim.topology import load_topology_file
    from fabricsim.traces import io
    from fabricsim.traces.schema import check_trace
    out: dict = {}

    def tick(name, f):
        t0 = time.perf_counter()
        v = f()
        out[name] = round(time.perf_counter() - t0, 3)
        return v
    raw = tick("trace parse", lambda: io._read_parquet(Path(trace)))
    tick("trace check", lambda: check_trace(raw))
    table = tick("trace to table", lambda: raw.to_table(1))
    topo = tick("topology build", lambda: load_topology_file(ROOT / "topologies" / f"{topology}.yaml"))
    tick("LinkTable", lambda: LinkTable(topo))
    tick("Replay.__init__", lambda: Replay(table))
    tick("Connections.__init__", lambda: Connections(table))
    _, sim = tick("prepare (all of it)", lambda: prepare(scenario(trace, topology)))
    model = sim.ideal_model()
    tick("ideal fct_rows", lambda: model.fct_rows(sim.messages))
    b = tick("LowerBound.__init__", lambda: LowerBound(model, sim.messages))
    tick("LowerBound.of", lambda: b.of(0))
    return out


def profiled_run(trace: str, topology: str) -> dict:
    import fabricsim
    pr = cProfile.Profile()
    t0 = time.perf_counter()
    pr.enable()
    fabricsim.run(scenario(trace, topology))
    pr.disable()
    out = {"wall (profiled)": round(time.perf_counter() - t0, 2)}
    stats = pstats.Stats(pr).stats
    for label, (fname, func) in RUN_PHASES.items():
        times = [ct for (f, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items()
                 if f.endswith("/" + fname) and name == func]
        # the two set-ups of replay.py add up; elsewhere the function of that name that took longest
        out[label] = round(sum(times) if fname == "replay.py" else max(times, default=0.0), 2)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="a Parquet trace (e.g. the 8,192-GPU DeepSeek-V3 layer)")
    ap.add_argument("--topology", default="gb300_8192_4x200g", help="topology preset")
    ap.add_argument("--profile-run", action="store_true", help="also run the scenario under cProfile")
    args = ap.parse_args(argv)
    import fabricsim
    print("tree:", Path(fabricsim.__file__).parent)
    for k, v in phases(args.trace, args.topology).items():
        print(f"{k:28s} {v:8.3f} s")
    if args.profile_run:
        for k, v in profiled_run(args.trace, args.topology).items():
            print(f"run: {k:28s} {v:8.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
