"""Flow engine at cluster scale: one DeepSeek-V3 MoE layer (dispatch + combine, forward) on the
GB300 + Spectrum-X presets, 512 to 8,192 GPUs, with ecmp and adaptive routing.

Each case runs in its own subprocess (peak RSS measured there, wall time of the whole
``fabricsim.run``: preparing, simulating, building the results). Two placements of the
expert-parallel groups (EP64, 4,096 tokens per GPU, top-8 of 256 experts, node-limited to 4
nodes of 8 GPUs, as the DeepSeek-V3 report):

- ``contiguous``: EP group ``g`` is GPUs ``64 g .. 64 g + 63``, inside one NVL72 domain (groups
  that straddle a rack boundary span two): most dispatch/combine bytes ride NVLink;
- ``across_racks``: the trace's nodes of 8 GPUs are placed rack-major (logical node ``i`` on the
  ``i``-th physical node in (slot in rack, rack) order), so an EP group's 8 nodes sit in 8
  different racks and every byte crosses the Spectrum-X fabric (EP64 across 8 nodes, as the
  DeepSeek-V3 report's H800 cluster).

Traces are generated once (``fabricsim trace moe``; about 25 s at 8,192 GPUs, cached in --cache).
A bare baseline measured in the same run (a numpy sort of as many int64 as the largest case
has messages) makes the figures comparable across machines::

    python3 benchmarks/bench_flow_scale.py                      # all sizes, both routings, both placements
    python3 benchmarks/bench_flow_scale.py --gpus 512 1024 --placements contiguous
    taskset -c 0 python3 benchmarks/bench_flow_scale.py --gpus 8192 --routing ecmp --placements contiguous \
        --baseline-src /work/wt/base        # and the same case with an older checkout, just before
    ... --phases                            # with the time of each phase (engine loop, solver, placement, ...)

Writes benchmarks/results/flow_scale.json and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TOPOLOGY = {512: "gb300_2048_4x200g.yaml", 1024: "gb300_2048_4x200g.yaml", 2048: "gb300_2048_4x200g.yaml",
            4096: "gb300_4096_4x200g.yaml", 8192: "gb300_8192_4x200g.yaml"}
GPUS_PER_RACK = 72
GPUS_PER_NODE = 8


def trace_path(cache: Path, gpus: int) -> Path:
    p = cache / f"dsv3_{gpus}.parquet"
    if not p.exists():
        cmd = [sys.executable, "-c", "from fabricsim.cli import main; main()", "trace", "moe", "-o", str(p),
               "--preset", "deepseek-v3", "--gpus", str(gpus), "--ep-size", "64", "--tokens-per-gpu", "4096",
               "--layers", "1", "--seed", "1"]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return p


def across_racks(src: Path, topo_gpus: int) -> Path:
    """The trace with its 8-GPU nodes placed rack-major on a cluster of ``topo_gpus`` GPUs."""
    import pyarrow.parquet as pq
    out = src.with_name(src.stem + "_across_racks.parquet")
    if out.exists():
        return out
    t = pq.read_table(src)
    nodes = topo_gpus // GPUS_PER_NODE
    per_rack = GPUS_PER_RACK // GPUS_PER_NODE
    order = sorted(range(nodes), key=lambda p: (p % per_rack, p // per_rack))
    gpu_map = np.empty(topo_gpus, dtype=np.int64)
    for logical, physical in enumerate(order):
        gpu_map[logical * GPUS_PER_NODE:(logical + 1) * GPUS_PER_NODE] = np.arange(
            physical * GPUS_PER_NODE, (physical + 1) * GPUS_PER_NODE)
    import pyarrow as pa
    cols = {}
    for name in t.column_names:
        col = t.column(name)
        if name in ("src", "dst"):
            col = pa.array(gpu_map[col.to_numpy()])
        cols[name] = col
    pq.write_table(pa.table(cols).replace_schema_metadata(t.schema.metadata), out)
    return out


CHILD = r"""
import functools, json, resource, sys, time
t0 = time.perf_counter()
import fabricsim
phases = {}
if len(sys.argv) > 2 and sys.argv[2] == "phases":
    # phase timers: cumulative wall seconds and calls of the engine's and solver's main parts
    import importlib
    def wrap(owner, name, key):
        f = getattr(owner, name, None)
        if f is None:
            return
        @functools.wraps(f)
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                p = phases.setdefault(key, [0.0, 0])
                p[0] += time.perf_counter() - t
                p[1] += 1
        setattr(owner, name, timed)
    api = importlib.import_module("fabricsim.api")
    fl = importlib.import_module("fabricsim.flows.fluid")
    fc = importlib.import_module("fabricsim.flows.fluid_compiled")
    eng = importlib.import_module("fabricsim.engine.flow").FlowEngine
    for owner, name, key in ((api, "prepare", "prepare"), (api, "build_result", "build_result"),
                             (eng, "_run", "engine loop"), (fl.FluidProblem, "solve", "solve (all)"),
                             (fc, "_kernel", "compiled kernel"), (fc, "_inc_kernel", "compiled kernel, kept lists"),
                             (fc, "_inc_build", "kept lists: built"), (fc, "_inc_update", "kept lists: updated"),
                             (fc.DirectImage, "_layout", "image layout"), (fc.DirectImage, "cover", "image extended"),
                             (eng, "_open_flows", "placement (opening flows)"), (eng, "_events", "events")):
        wrap(owner, name, key)
r = fabricsim.run(json.loads(sys.argv[1]))
wall = time.perf_counter() - t0
s = r.summary
out = {"wall_s": wall, "engine_wall_s": s["run"]["wall_time_s"], "status": s["run"]["status"],
       "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
       "messages": s["messages"]["total"], "completed": s["messages"]["completed"],
       "duration_ps": s["pattern"]["duration_ps"], "ideal_duration_ps": s["pattern"]["ideal_duration_ps"],
       "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
       "ops": {k: v for k, v in (s.get("collectives") or {}).items() if not isinstance(v, dict)},
       **{k: s["run"].get(k) for k in ("flows", "flow_rate_recomputations", "flow_solver_iterations", "flow_steps",
                                         "flow_segments", "flow_peak_concurrent", "flow_solver", "flow_rates_kept")}}
if phases:
    out["phases"] = {k: [round(v[0], 3), v[1]] for k, v in phases.items()}
print(json.dumps(out))
"""


def run_case(trace: Path, topology: str, routing: str, group: float, releases: str, src: Path = ROOT,
             phases: bool = False) -> dict:
    scenario = {"name": "dsv3_layer", "topology": {"kind": "file", "path": str(ROOT / "topologies" / topology)},
                "traffic": {"pattern": "trace", "path": str(trace)}, "routing": {"policy": routing},
                "simulation": {"engine": "flow", "time_limit": "1s", "flow": {"group": group, "releases": releases}},
                "outputs": {"link_sample_interval": "off"}}
    env = {**os.environ, "PYTHONPATH": str(src)}
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(scenario)] + (["phases"] if phases else []),
                       capture_output=True, text=True, cwd=src, env=env)
    if p.returncode:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, nargs="+", default=[512, 1024, 2048, 4096, 8192])
    ap.add_argument("--routing", nargs="+", default=["ecmp", "adaptive"])
    ap.add_argument("--placements", nargs="+", default=["contiguous", "across_racks"])
    ap.add_argument("--group", type=float, default=0.01, help="simulation.flow.group (grouping window)")
    ap.add_argument("--releases", default="grouped", choices=["on_time", "grouped"],
                    help="simulation.flow.releases (grouped: every release in a window waits for its end)")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fabricsim_bench_traces"))
    ap.add_argument("--out", type=Path, default=HERE / "results" / "flow_scale.json")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="another checkout (e.g. a git worktree of an older commit): every case is also run "
                         "with its fabricsim, just before this one's, and reported as baseline_*")
    ap.add_argument("--phases", action="store_true",
                    help="time the main phases (preparation, engine loop, solver and its parts, placement, "
                         "results) in each case's process, both trees: reported as phases / baseline_phases "
                         "(cumulative wall s, calls; the timers add a little overhead)")
    args = ap.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = []
    for gpus in args.gpus:
        t0 = time.perf_counter()
        base = trace_path(args.cache, gpus)
        gen_s = time.perf_counter() - t0
        topo = TOPOLOGY[gpus]
        topo_gpus = int(topo.split("_")[1])
        for placement in args.placements:
            trace = base if placement == "contiguous" else across_racks(base, topo_gpus)
            for routing in args.routing:
                b = None
                if args.baseline_src is not None:
                    b = run_case(trace, topo, routing, args.group, args.releases, src=args.baseline_src.resolve(),
                                 phases=args.phases)
                r = run_case(trace, topo, routing, args.group, args.releases, phases=args.phases)
                if b is not None:
                    r.update({f"baseline_{k}": b.get(k) for k in ("wall_s", "engine_wall_s", "peak_rss_mb",
                                                                   "duration_ps", "error", "phases")
                              if k != "phases" or args.phases})
                r.update(gpus=gpus, topology=topo, placement=placement, routing=routing, group=args.group,
                         releases=args.releases)
                rows.append(r)
                print(json.dumps(r), flush=True)
        rows[-1]["trace_generation_s"] = gen_s
    n = max((r.get("messages", 0) for r in rows), default=0)
    a = np.random.default_rng(0).integers(0, 2**62, size=max(n, 1))
    t0 = time.perf_counter()
    np.sort(a)
    baseline = time.perf_counter() - t0
    for r in rows:
        if "wall_s" in r:
            r["wall_over_baseline_sort"] = r["wall_s"] / baseline
    out = {"command": "python3 benchmarks/bench_flow_scale.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "date": date.today().isoformat(),
           "machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "processor": platform.processor()},
           "baseline": {"what": f"numpy sort of {n} int64", "seconds": baseline},
           "baseline_src": str(args.baseline_src) if args.baseline_src else None,
           "target": {"gpus": 8192, "wall_s": 60, "peak_rss_mb": 4096}, "cases": rows}
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(f"\n| GPUs | placement | routing | messages | flows | recomputations | wall s | engine s | peak MB | "
          f"layer ms | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['gpus']} | {r['placement']} | {r['routing']} | error: {r['error']} |")
            continue
        print(f"| {r['gpus']} | {r['placement']} | {r['routing']} | {r['messages']:,} | {r['flows']:,} | "
              f"{r['flow_rate_recomputations']} | {r['wall_s']:.1f} | {r['engine_wall_s']:.1f} | {r['peak_rss_mb']:.0f} | "
              f"{(r['duration_ps'] or 0) / 1e9:.3f} | {r['completion_time_ratio'] or 0:.3f} |")
    print(f"baseline: {out['baseline']['what']} in {baseline:.3f} s")


if __name__ == "__main__":
    main()
