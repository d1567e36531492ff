"""NIC transmit attempts that send nothing, on the 128-host 8 MB permutation (issue 15, "remove
the wasted NIC wake-ups").

Workload: ``bench_htsim.scenario(policy, "default", seed)`` (bench_routing.py's ``128`` fabric:
16 leaves x 8 hosts, 8 spines, 400G; DDP receiver, one ACK per packet, lossy 2 MiB ports). Per
policy, for this tree and (``--baseline-src DIR``) another checkout, in alternating order, each in
a fresh interpreter pinned to the caller's CPU set::

    taskset -c 0 python3 benchmarks/bench_nic_wakeups.py --baseline-src /work/wt/base

Counted (``Nic.tx_calls``, ``Nic.tx_sent``): transmit attempts run, attempts that sent a data
unit; ``idle_fraction`` = 1 - sent / attempts. Also the run's events, its wall time (engine
only) and the completion figures, so a change in the model's timing shows next to the events it
saves. Writes ``benchmarks/results/nic_wakeups.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
import bench_htsim
from bench_nvlink import run_engine
eng, res, wall = run_engine(bench_htsim.scenario(sys.argv[1], "default", int(sys.argv[2])))
nics = [n for ns in eng.nics.values() for n in ns]
calls = sum(n.tx_calls for n in nics)
sent = sum(n.tx_sent for n in nics)
m = res.messages
print(json.dumps({"status": res.summary["run"]["status"], "events": res.summary["run"]["events"],
                  "engine_wall_s": round(wall, 3), "nic_tx_attempts": calls, "nic_tx_sent": sent,
                  "idle_fraction": 1 - sent / calls if calls else None,
                  "last_end_us": float(m["end_ps"].max()) / 1e6, "mean_end_us": float(m["end_ps"].mean()) / 1e6,
                  "completion_time_ratio": res.summary["effective_bandwidth"]["completion_time_ratio"]}))
"""


def run(src: Path, policy: str, seed: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    p = subprocess.run([sys.executable, "-c", CHILD, policy, str(seed), str(HERE)], capture_output=True,
                       text=True, env=env, cwd=src)
    if p.returncode:
        return {"error": (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", default=["ecmp", "spray", "adaptive"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--baseline-src", type=Path, default=None, help="another checkout, run beside this one")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "nic_wakeups.json")
    a = ap.parse_args(argv)
    trees = {"this": ROOT} | ({"baseline": a.baseline_src} if a.baseline_src else {})
    rows = []
    for i, pol in enumerate(a.policies):
        order = list(trees.items()) if i % 2 == 0 else list(trees.items())[::-1]
        for label, src in order:
            r = {"policy": pol, "tree": label, "src": str(src), **run(src, pol, a.seed)}
            rows.append(r)
            if "error" in r:
                print(f"{pol:9s} {label:9s} error: {r['error']}")
                continue
            print(f"{pol:9s} {label:9s} attempts {r['nic_tx_attempts']:>9,d} sent {r['nic_tx_sent']:>9,d} "
                  f"idle {r['idle_fraction']:6.1%}  events {r['events']:>10,d}  engine {r['engine_wall_s']:6.2f} s  "
                  f"last {r['last_end_us']:8.2f} us  mean {r['mean_end_us']:8.2f} us", flush=True)
    out = {"command": " ".join(["python3", "benchmarks/bench_nic_wakeups.py", *(argv or sys.argv[1:])]),
           "date": date.today().isoformat(), "machine": platform.processor() or platform.machine(),
           "cpus": sorted(os.sched_getaffinity(0)), "seed": a.seed, "rows": rows}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
