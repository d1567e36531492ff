#!/usr/bin/env python3
"""A/B speed of the compiled packet core: two source trees, the same scenario, alternating runs.

Each tree is a copy of the package (``git archive COMMIT fabricsim benchmarks | tar -x -C DIR``,
or ``--export COMMIT DIR`` here) with its own numba cache, compiled on its first run (minutes on
a busy machine; the tree keeps it). Every round runs both trees, in fresh subprocesses pinned to
one core, order flipped each round; a run times ``engine.run()`` only (the compiled core and the
Python driver around it: releases, completions, link samples; not imports, set-up or tables) as
CPU time of the process (``time.process_time``, which a busy machine inflates less than wall time)
and as wall time, best of ``--runs``. The event counts of the two trees must match. Reports the
per-round ratios A/B (above 1: B is faster) and their median::

    python3 benchmarks/ab_compiled.py --export 932f0f0 /tmp/ab/base      # once per commit
    python3 benchmarks/ab_compiled.py /tmp/ab/base . --case htsim:ecmp:as_htsim_roce:8MB \\
        --case packet:adaptive:4MiB --rounds 3 --json benchmarks/results/compiled_perf.json

Cases: ``htsim:POLICY:VARIANT:SIZE`` is bench_htsim.py's 128-host permutation (PFC and go-back-N
with ``as_htsim_roce``), ``packet:POLICY:SIZE`` bench_packet.py's permutation (``FULL``, lossy, DDP) and ``a2a:POLICY:SIZE`` its
all-to-all of SIZE per ordered pair.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import sys, time, json, gc
tree, case, runs = sys.argv[1], sys.argv[2].split(":"), int(sys.argv[3])
sys.path.insert(0, tree + "/benchmarks")
import fabricsim
assert fabricsim.__file__.startswith(tree), fabricsim.__file__
from fabricsim.api import prepare
from fabricsim.analysis.recorder import Recorder
from fabricsim.engine import ENGINES
if case[0] in ("packet", "a2a"):
    import bench_packet as bp
    if case[0] == "packet":
        sc = bp.scenario(dict(bp.FULL, message_size=case[2]), case[1], "compiled")
    else:
        sc = bp.scenario(dict(bp.FULL, a2a_size=case[2]), case[1], "compiled", "all_to_all")
else:
    from bench_htsim import scenario
    sc = scenario(case[1], case[2], 1, kernel="compiled")
    sc["traffic"]["message_size"] = case[3]
best = None
for _ in range(runs):
    _, sim = prepare(sc)
    engine = ENGINES.get(sim.scenario.simulation.engine)(sim, Recorder())
    gc.collect()
    c0, w0 = time.process_time(), time.perf_counter()
    out = engine.run()
    r = (time.process_time() - c0, time.perf_counter() - w0)
    best = r if best is None or r[0] < best[0] else best
print(json.dumps({"cpu_s": best[0], "wall_s": best[1], "events": out.events, "packet_hops": out.packet_hops,
                  "kernel": engine.kernel.name}))
'''


def run_one(tree: str, case: str, runs: int, cpu: str) -> dict:
    p = subprocess.run(["taskset", "-c", cpu, sys.executable, "-c", CHILD, tree, case, str(runs)],
                       capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=tree), cwd=tree)
    if p.returncode:
        sys.exit(f"{tree} {case}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trees", nargs="*", help="tree A (reference) and tree B")
    ap.add_argument("--export", nargs=2, metavar=("COMMIT", "DIR"), help="write COMMIT's package into DIR and stop")
    ap.add_argument("--case", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=2, help="runs per process, best kept")
    ap.add_argument("--cpu", default="0", help="taskset CPU list")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    if args.export:
        commit, out = args.export
        Path(out).mkdir(parents=True, exist_ok=True)
        repo = Path(__file__).resolve().parent.parent
        tar = subprocess.run(["git", "-C", str(repo), "archive", commit, "fabricsim", "benchmarks"],
                             capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", out], input=tar, check=True)
        return 0
    a, b = (str(Path(t).resolve()) for t in args.trees)
    out = {"trees": [a, b], "cases": {}}
    for case in args.case or ["htsim:ecmp:as_htsim_roce:8MB"]:
        runs = {a: [], b: []}
        for i in range(args.rounds):
            for tree in ((a, b) if i % 2 == 0 else (b, a)):
                runs[tree].append(run_one(tree, case, args.runs, args.cpu))
        ev = {r["events"] for t in (a, b) for r in runs[t]}
        if len(ev) != 1:
            sys.exit(f"{case}: the event counts differ: {runs}")
        ratios = sorted(x["cpu_s"] / y["cpu_s"] for x, y in zip(runs[a], runs[b]))
        best = {t: min(r["cpu_s"] for r in runs[t]) for t in (a, b)}
        hops = runs[a][0]["packet_hops"]
        res = out["cases"][case] = {
            "events": ev.pop(), "packet_hops": hops, "kernel": [runs[a][0]["kernel"], runs[b][0]["kernel"]],
            "cpu_s_a": [r["cpu_s"] for r in runs[a]], "cpu_s_b": [r["cpu_s"] for r in runs[b]],
            "wall_s_a": [r["wall_s"] for r in runs[a]], "wall_s_b": [r["wall_s"] for r in runs[b]],
            "best_cpu_s": [best[a], best[b]], "hops_per_cpu_s": [hops / best[a], hops / best[b]],
            "speedup_paired_median": statistics.median(ratios), "speedup_paired_range": [ratios[0], ratios[-1]]}
        print(f"{case}: {res['events']:,} events  A {best[a]:.3f} s  B {best[b]:.3f} s (best CPU)  "
              f"{hops / best[a] / 1e6:.2f} -> {hops / best[b] / 1e6:.2f} M hops/s  "
              f"x{res['speedup_paired_median']:.2f} paired median (x{ratios[0]:.2f}-{ratios[-1]:.2f})", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
