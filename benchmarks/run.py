"""Both engines on the same scenarios, one table: what each predicts and what it costs.

    python3 benchmarks/run.py            # the default set (about two minutes on one core)
    python3 benchmarks/run.py --quick    # the two smallest cases

For every case the same scenario runs with ``simulation.engine: packet`` and ``flow``; the table
gives each engine's pattern duration and completion-time ratio, their relative difference, the
wall time of each ``fabricsim.run`` and the speed-up. A bare baseline measured in the same run
(a pure-Python heapq loop of one million pushes and pops, the floor under any event-driven
simulation in this interpreter) is printed beside them, so the wall times can be read on any
machine as multiples of it. Writes benchmarks/results/engines.json.

The packet runs use deployment settings, not the fluid's assumptions: ``ecmp`` cases run with
``profile: none`` (lossy 2 MiB port buffers, no congestion control: collisions drop packets and
the transport recovers by timeouts) and ``adaptive`` ones with ``profile: spectrum_x``
(telemetry CC, PFC). The flow engine assumes ideal, lossless congestion control, so the gaps
in this table are what that assumption leaves out (largest on ECMP with lossy buffers); the
like-for-like comparison (lossless, no CC) is docs/fidelity/flow.md.
"""
from __future__ import annotations

import argparse
import heapq
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import fabricsim  # noqa: E402

LS = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8}
CASES = [
    ("permutation 32 hosts 4MiB", LS, {"pattern": "permutation", "locality": "cross_leaf", "message_size": "4MiB"},
     ["ecmp", "adaptive"]),
    ("all_to_all 32 hosts 256KiB", LS, {"pattern": "all_to_all", "message_size": "256KiB"}, ["ecmp", "adaptive"]),
    ("incast 16->1 1MiB", LS, {"pattern": "incast", "senders": 16, "receiver": 0, "message_size": "1MiB"},
     ["adaptive"]),
    ("MoE DSV3 64 GPUs (HGX)", {"kind": "file", "path": str(ROOT / "scenarios" / "moe_dsv3_64gpu_flat.yaml")},
     None, ["adaptive"]),
]


def bare_baseline(n: int = 1_000_000) -> float:
    h: list = []
    t0 = time.perf_counter()
    for i in range(n):
        heapq.heappush(h, (i * 7919 % n, i))
    while h:
        heapq.heappop(h)
    return time.perf_counter() - t0


def scenario(topology, traffic, routing, engine):
    if traffic is None:     # a scenario file
        return {"_file": topology["path"], "sets": [f"routing.policy={routing}", f"simulation.engine={engine}"]}
    return {"name": "bench", "profile": "spectrum_x" if routing == "adaptive" else "none", "topology": topology,
            "traffic": traffic, "routing": {"policy": routing}, "simulation": {"engine": engine},
            "outputs": {"link_sample_interval": "off"}}


def run_one(sc):
    t0 = time.perf_counter()
    if "_file" in sc:
        r = fabricsim.run(sc["_file"], overrides=sc["sets"])
    else:
        r = fabricsim.run(sc)
    wall = time.perf_counter() - t0
    s = r.summary
    return {"wall_s": wall, "duration_ps": s["pattern"]["duration_ps"],
            "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
            "status": s["run"]["status"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "engines.json")
    args = ap.parse_args(argv)
    base = bare_baseline()
    rows = []
    for name, topo, traffic, routings in (CASES[:2] if args.quick else CASES):
        for routing in routings:
            res = {e: run_one(scenario(topo, traffic, routing, e)) for e in ("packet", "flow")}
            p, f = res["packet"], res["flow"]
            diff = ((f["duration_ps"] - p["duration_ps"]) / p["duration_ps"]
                    if p["duration_ps"] and f["duration_ps"] else None)
            rows.append({"case": name, "routing": routing, "packet": p, "flow": f, "duration_rel_diff": diff,
                         "speedup": p["wall_s"] / f["wall_s"] if f["wall_s"] else None})
    out = {"command": "python3 benchmarks/run.py" + (" --quick" if args.quick else ""), "date": date.today().isoformat(),
           "machine": {"python": platform.python_version(), "platform": platform.platform()},
           "baseline": {"what": "pure-Python heapq: 1,000,000 pushes and pops", "seconds": base}, "cases": rows}
    if not args.quick:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("| case | routing | packet duration us | flow duration us | flow vs packet | packet ratio | flow ratio | "
          "packet wall s (x baseline) | flow wall s (x baseline) | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        p, f = r["packet"], r["flow"]
        print(f"| {r['case']} | {r['routing']} | {p['duration_ps'] / 1e6:.1f} | {f['duration_ps'] / 1e6:.1f} | "
              f"{100 * r['duration_rel_diff']:+.1f} % | {p['completion_time_ratio']:.3f} | {f['completion_time_ratio']:.3f} | "
              f"{p['wall_s']:.2f} ({p['wall_s'] / base:.1f}) | {f['wall_s']:.2f} ({f['wall_s'] / base:.2f}) | "
              f"{r['speedup']:.0f}x |")
    print(f"baseline: {out['baseline']['what']}: {base:.3f} s")
    print("packet runs: ecmp with profile none (lossy, no CC), adaptive with profile spectrum_x; flow: ideal CC, "
          "lossless (see the module doc)")


if __name__ == "__main__":
    main()
