#!/usr/bin/env python3
"""A/B speed of the packet engine: the working tree against its hot-path files at a base commit.

The reference is the tree :mod:`check_equivalence` builds (the working tree with ``HOT_FILES``
from ``--base``), imported in the same process as package ``fabricsim_ref``. Runs of the two
alternate (order flipped every round), so the drift of a shared machine hits both alike. Only
``engine.run()`` is timed (scenario and engine set-up excluded), with a ``gc.collect()`` before each.
Reports the best and the median packet-hops/s per side, and the median of the per-round
ratios new/base (the most robust figure on a busy machine)::

    python3 benchmarks/ab_compare.py --base 3d845ae --rounds 5
    python3 benchmarks/ab_compare.py --base 7818191 --new 6ae4d9a     # one past step
    python3 benchmarks/ab_compare.py --routing adaptive --keep fabricsim/routing/adaptive.py
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_packet import FULL, QUICK, scenario  # noqa: E402
from check_equivalence import BASE_COMMIT, reference_tree  # noqa: E402


def time_run(pkg, sc: dict) -> tuple[float, int]:
    """(engine.run() seconds, packet hops) for scenario ``sc`` with package ``pkg``."""
    prepare = importlib.import_module(pkg.__name__ + ".api").prepare
    Recorder = importlib.import_module(pkg.__name__ + ".analysis.recorder").Recorder
    ENGINES = importlib.import_module(pkg.__name__ + ".engine").ENGINES
    _, sim = prepare(sc)
    engine = ENGINES.get(sim.scenario.simulation.engine)(sim, Recorder())
    gc.collect()
    t0 = time.perf_counter()
    out = engine.run()
    return time.perf_counter() - t0, out.packet_hops


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default=BASE_COMMIT)
    ap.add_argument("--new", help="commit whose HOT_FILES make the 'new' side (default: the working tree)")
    ap.add_argument("--keep", nargs="*", default=[])
    ap.add_argument("--routing", nargs="+", default=["ecmp", "adaptive", "spray"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--label", default="", help="name of the change, stored with --json")
    ap.add_argument("--json", help="append the result as one JSON line to this file")
    args = ap.parse_args(argv)
    cfg = dict(QUICK if args.quick else FULL)
    res = {}
    with tempfile.TemporaryDirectory(prefix="fabricsim_ref_") as tmp:
        reference_tree(Path(tmp), args.base, args.keep, package="fabricsim_ref")
        if args.new:
            reference_tree(Path(tmp), args.new, [], package="fabricsim_new")
        sys.path.insert(0, tmp)
        ref = importlib.import_module("fabricsim_ref")
        new = importlib.import_module("fabricsim_new" if args.new else "fabricsim")
        for routing in args.routing:
            sc = scenario(cfg, routing)
            a, b = [], []
            for i in range(args.rounds):
                for side in ((ref, a), (new, b)) if i % 2 == 0 else ((new, b), (ref, a)):
                    wall, hops = time_run(side[0], sc)
                    side[1].append(hops / wall)
            paired = sorted(y / x for x, y in zip(a, b))     # same round: same machine state
            r = res[routing] = {"base_best": max(a), "new_best": max(b), "base_median": statistics.median(a),
                                "new_median": statistics.median(b), "speedup_best": max(b) / max(a),
                                "speedup_paired_median": statistics.median(paired),
                                "speedup_paired_range": [paired[0], paired[-1]]}
            print(f"{routing:9s} base {r['base_best']:>9,.0f} (median {r['base_median']:>9,.0f})  "
                  f"new {r['new_best']:>9,.0f} (median {r['new_median']:>9,.0f})  hops/s   "
                  f"x{r['speedup_best']:.2f} best/best, x{r['speedup_paired_median']:.2f} median of paired "
                  f"[{paired[0]:.2f}-{paired[-1]:.2f}]", flush=True)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps({"label": args.label, "base": args.base, "new": args.new or "working tree",
                                 "keep": args.keep, "rounds": args.rounds,
                                 "quick": args.quick, "results": res}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
