#!/usr/bin/env python3
"""Speed of the compiled core in several checkouts of fabricsim, interleaved, in one run.

Usage::

    git archive <commit> | tar -x -C /tmp/src_<commit>      # one directory per checkout to compare
    python3 benchmarks/bench_compiled_checkouts.py --rounds 5 /tmp/src_a /tmp/src_b .

Each round runs every checkout once, in turn, each in a fresh interpreter pinned to CPU 0
(``taskset -c 0``) that imports fabricsim from that directory only (PYTHONPATH cleared): the
128-host leaf-spine of ``bench_packet.py`` (8 x 16 hosts, 16 spines, 400G) with its cross-leaf
permutation of 4 MiB per host, on ``simulation.kernel: compiled``, once per routing policy
(``--routings``). It times ``PacketEngine.run`` (the event loop with the Python lifecycle, as
``summary.run.wall_time_s`` does) in CPU time, which a shared machine's other processes disturb
less than wall time, and prints every round and the best of each. Warm each checkout's numba cache
first (one compiled run in it): a compilation inside a timed round would dominate it.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time


def worker(src: str, routings: list[str]) -> None:
    sys.path.insert(0, src)
    sys.path.insert(0, os.path.join(src, "benchmarks"))
    import bench_packet as bp

    import fabricsim
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine import ENGINES
    if not fabricsim.__file__.startswith(os.path.abspath(src)):
        raise SystemExit(f"imported {fabricsim.__file__}, not {src}")
    out = {}
    for r in routings:
        _loaded, sim = prepare(bp.scenario(bp.FULL, r, "compiled"))
        s = sim.scenario
        eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
        if eng.kernel_info["ran"] != "compiled":
            raise SystemExit(f"{src}: did not run compiled: {eng.kernel_info}")
        gc.collect()
        t0, c0 = time.perf_counter(), time.process_time()
        eng.run()
        out[r] = (time.process_time() - c0, time.perf_counter() - t0, eng.kernel.events)
    print(json.dumps(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", help="checkout directories (each with fabricsim/ and benchmarks/)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--routings", nargs="+", default=["ecmp", "spray"])
    args = ap.parse_args(argv)
    dirs = [os.path.abspath(d) for d in args.dirs]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cpu: dict = {d: {} for d in dirs}
    for i in range(args.rounds):
        for d in dirs:
            p = subprocess.run(["taskset", "-c", "0", sys.executable, os.path.abspath(__file__), "--worker", d,
                                ",".join(args.routings)], capture_output=True, text=True, env=env, cwd="/")
            if p.returncode:
                print(p.stdout, p.stderr[-3000:])
                return 1
            for r, (c, w, ev) in json.loads(p.stdout.strip().splitlines()[-1]).items():
                cpu[d].setdefault(r, []).append(c)
                print(f"round {i} {d} {r}: cpu {c:.3f} s, wall {w:.3f} s, {ev} events", flush=True)
    for d in dirs:
        print(d, "  ".join(f"{r} best {min(v):.3f} s (all {' '.join(f'{x:.3f}' for x in v)})" for r, v in cpu[d].items()))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3].split(","))
        sys.exit(0)
    sys.exit(main())
