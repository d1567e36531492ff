#!/usr/bin/env python3
"""The end of a packet-engine run: what ``PacketEngine.run`` spends after the event loop stops.

On the 128-host all-to-all of 64 KiB per ordered pair (bench_packet.py's, ECMP; 16,256 messages),
for each source tree given (a copy of the package, e.g. ``git archive COMMIT fabricsim benchmarks |
tar -x -C DIR``; ``.`` the working tree), in fresh subprocesses pinned to one core, trees
alternating, ``--repeat`` rounds, best of them reported:

* ``end``: from the moment the compiled kernel starts writing its state back (``state.write_back``;
  on ``heap`` the event loop's return) to ``engine.run()``'s return: the write-back, the status
  pass, the final table rows (``Recorder.refresh``), the links table, the counters and the
  conservation check, and the cyclic collector catching up (it is paused while events run);
* ``write_back``: ``state.write_back`` alone (compiled);
* then, after the run, each piece again with the collector off, best of 7 calls:
  ``write_back``, ``refresh``, ``conservation``, ``counters`` (``Sender.counters``).

::

    python3 benchmarks/bench_run_end.py /tmp/base . --repeat 3 --cpu 0
    python3 benchmarks/bench_run_end.py . --kernel heap
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r'''
import sys, time, gc, json
tree, kernel = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree + "/benchmarks")
import fabricsim
assert fabricsim.__file__.startswith(tree), fabricsim.__file__
import bench_packet as B
from fabricsim.api import prepare
from fabricsim.analysis.recorder import Recorder
from fabricsim.engine import ENGINES
import fabricsim.engine.compiled.state as S
cfg = {"hosts_per_leaf": 8, "leaves": 16, "spines": 8, "message_size": "8MB", "a2a_size": "64KiB"}
_, sim = prepare(B.scenario(cfg, "ecmp", kernel, "all_to_all"))
rec = Recorder(sim.scenario.outputs.latency_rel_error, sim.scenario.outputs.timeseries_bin)
eng = ENGINES.get("packet")(sim, rec)
mark = {}
wb = S.write_back
def write_back(*a):
    mark["start"] = time.perf_counter()
    wb(*a)
    mark["wb"] = time.perf_counter() - mark["start"]
S.write_back = write_back
krun = eng.kernel.run
def run(*a, **k):
    out = krun(*a, **k)
    mark.setdefault("start", time.perf_counter())
    return out
eng.kernel.run = run
gc.collect()
out = eng.run()
t = time.perf_counter()
res = {"end": t - mark["start"], "write_back": mark.get("wb"), "events": out.events}
S.write_back = wb
k = eng.kernel
gc.collect()
gc.disable()
def best(f, n=7):
    b = None
    for _ in range(n):
        a = time.perf_counter(); f(); d = time.perf_counter() - a
        b = d if b is None else min(b, d)
    return b
if kernel == "compiled":
    res["write_back_alone"] = best(lambda: S.write_back(k.X, eng, k.qps, k.nic_row, k.states, k._read_t))
res["refresh"] = best(rec.refresh)
res["conservation"] = best(eng.conservation)
res["counters"] = best(eng.sender.counters)
print(json.dumps(res))
'''

KEYS = ("end", "write_back", "write_back_alone", "refresh", "conservation", "counters")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trees", nargs="+", help="source trees (each holds fabricsim/ and benchmarks/)")
    ap.add_argument("--kernel", default="compiled", choices=("compiled", "heap"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cpu", type=int, default=0, help="the core the runs are pinned to (taskset)")
    args = ap.parse_args(argv)
    trees = [str(Path(t).resolve()) for t in args.trees]
    runs: dict = {t: [] for t in trees}
    for i in range(args.repeat):
        for tree in (trees if i % 2 == 0 else trees[::-1]):
            out = subprocess.run(["taskset", "-c", str(args.cpu), sys.executable, "-c", CHILD, tree, args.kernel],
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree},
                                 cwd=tree)
            if out.returncode:
                raise SystemExit(out.stderr)
            runs[tree].append(json.loads(out.stdout))
    events = {r["events"] for rs in runs.values() for r in rs}
    if len(events) != 1:
        raise SystemExit(f"the trees ran different event counts: {events}")
    print(f"{args.kernel}, 128-host all-to-all 64 KiB, best of {args.repeat} (ms):")
    for tree, rs in runs.items():
        best = {k: min(r[k] for r in rs) * 1e3 for k in KEYS if rs[0].get(k) is not None}
        print(f"  {tree}: " + ", ".join(f"{k} {v:.1f}" for k, v in best.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
