#!/usr/bin/env python3
"""Machine instructions per packet-hop, counted by valgrind: a noise-free measure of a change.

Wall-clock rates on a shared machine drift by 10-30 % between runs; the number of instructions
an engine run executes does not (it is exact and repeatable). For each ``--commits`` entry the
package is rebuilt as in :mod:`check_equivalence` (working tree with ``HOT_FILES`` from that
commit; ``work`` = the working tree itself) and run under ``valgrind --tool=cachegrind
--cache-sim=no`` twice: scenario set-up only, and set-up plus ``engine.run()``. The difference
is the run's instructions::

    python3 benchmarks/count_instructions.py --commits 3d845ae work --routing ecmp spray
    python3 benchmarks/count_instructions.py --full     # the 128-host scenario (slow: ~2 min a run)

Instruction counts miss memory stalls (a deeper heap costs more cache misses than instructions),
so they complement the wall-clock A/B of :mod:`ab_compare`; they do not replace it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from check_equivalence import ROOT, reference_tree  # noqa: E402

RUNNER = """
import sys, importlib
sys.path.insert(0, {here!r})
import bench_packet as b
pkg, routing, size, do_run = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
prepare = importlib.import_module(pkg + ".api").prepare
Recorder = importlib.import_module(pkg + ".analysis.recorder").Recorder
ENGINES = importlib.import_module(pkg + ".engine").ENGINES
cfg = dict(b.QUICK if size == "quick" else b.FULL)
_, sim = prepare(b.scenario(cfg, routing))
engine = ENGINES.get("packet")(sim, Recorder())
if do_run:
    out = engine.run()
    print("HOPS", out.packet_hops, "EVENTS", out.events)
"""


def _valgrind(tree: Path, pkg: str, routing: str, size: str, do_run: bool) -> tuple[int, int, int]:
    script = tree / "_vg_runner.py"
    out = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                          sys.executable, str(script), pkg, routing, size, "1" if do_run else "0"],
                         capture_output=True, text=True, cwd=tree,
                         # fixed hash seed: set and dict orders (and so the work done) repeat exactly
                         env=dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0"))
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if not m:
        sys.exit(f"valgrind failed:\n{out.stderr[-2000:]}")
    hops = re.search(r"HOPS (\d+) EVENTS (\d+)", out.stdout)
    return int(m.group(1).replace(",", "")), int(hops.group(1)) if hops else 0, int(hops.group(2)) if hops else 0


def count(tree: Path, pkg: str, routing: str, size: str, pool, reps: int = 1) -> dict:
    """Run instructions = min over ``reps`` of (set-up + run) - min over ``reps`` of (set-up):
    counts still vary by ~1-3 % between identical runs (allocation addresses, GC timing)."""
    full = [pool.submit(_valgrind, tree, pkg, routing, size, True) for _ in range(reps)]
    setup = [pool.submit(_valgrind, tree, pkg, routing, size, False) for _ in range(reps)]
    ir_full, hops, events = min(f.result() for f in full)
    ir_setup = min(f.result()[0] for f in setup)
    run = ir_full - ir_setup
    return {"run_instructions": run, "packet_hops": hops, "events": events,
            "instructions_per_hop": run / hops, "instructions_per_event": run / events}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--commits", nargs="+", default=["3d845ae", "work"],
                    help="commits whose HOT_FILES to count ('work' = the working tree)")
    ap.add_argument("--routing", nargs="+", default=["ecmp", "adaptive", "spray"])
    ap.add_argument("--full", action="store_true", help="the 128-host scenario instead of the 32-host one")
    ap.add_argument("--reps", type=int, default=3, help="valgrind runs per count (the minimum is kept)")
    ap.add_argument("--json", help="append the results as one JSON line to this file")
    args = ap.parse_args(argv)
    if not shutil.which("valgrind"):
        sys.exit("valgrind not found")
    size = "full" if args.full else "quick"
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="fabricsim_ir_") as tmp, ThreadPoolExecutor(2) as pool:
        for i, commit in enumerate(args.commits):
            tree = Path(tmp) / f"t{i}"
            tree.mkdir()
            if commit == "work":
                shutil.copytree(ROOT / "fabricsim", tree / "fabricsim_c", ignore=shutil.ignore_patterns("__pycache__"))
            else:
                reference_tree(tree, commit, [], package="fabricsim_c")
            (tree / "_vg_runner.py").write_text(RUNNER.format(here=str(HERE)))
            for routing in args.routing:
                r = results.setdefault(commit, {})[routing] = count(tree, "fabricsim_c", routing, size, pool, args.reps)
                base = results[args.commits[0]][routing]["instructions_per_hop"]
                print(f"{commit:9s} {routing:9s} {r['instructions_per_hop']:>8,.0f} instructions/hop "
                      f"{r['instructions_per_event']:>8,.0f} /event   x{base / r['instructions_per_hop']:.3f} "
                      f"vs {args.commits[0]}", flush=True)
    if args.json:
        with open(args.json, "a") as fh:
            fh.write(json.dumps({"size": size, "reps": args.reps, "results": results}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
