"""Routing policies on saturated cross-leaf permutations: completion-time ratio per seed and how
often a flow's packet takes the same uplink as the flow's previous packet.

Fabrics (400G, 8 hosts per leaf over 8 spines, so ACKs load the downlinks to ~102 %):

* ``32``: the quickstart fabric, 4 leaves, 500 ns links, 600 ns switches, 4 MiB per host;
* ``128``: 16 leaves, 1 us links, 8 MB per host (the htsim comparison case).

Policies: ``ecmp``, ``spray``, ``adaptive`` with ``exact: true`` (the earlier policy), graded
``adaptive`` without remote grades, graded ``adaptive`` with the defaults (remote grades on), and
with remote grades at local resolution (``remote_ref: 2MiB``, which herds).

    python3 benchmarks/bench_routing.py                 # both fabrics, seeds 1-5, ~4 min
    python3 benchmarks/bench_routing.py --fabric 32 --seeds 1 2

Prints a table and writes ``benchmarks/results/routing.json``. P(same uplink) counts data packets
at the switch that chose among several ports, per queue pair: uniform choice over 8 ports gives
1/8.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import tempfile
import time

import fabricsim
from fabricsim.engine import packet as packet_engine

POLICIES = {
    "ecmp": {"policy": "ecmp"},
    "spray": {"policy": "spray"},
    "adaptive_exact": {"policy": "adaptive", "exact": True},
    "adaptive_local": {"policy": "adaptive", "remote": False},
    "adaptive": {"policy": "adaptive"},
    "adaptive_fine_remote": {"policy": "adaptive", "remote_ref": "2MiB"},
}


def fabric(name: str, routing: dict, seed: int) -> dict:
    if name == "32":
        topo = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8,
                "host_link": {"rate": "400Gbps", "delay": "500ns"},
                "fabric_link": {"rate": "400Gbps", "delay": "500ns"}, "switch_latency": "600ns"}
        size = "4MiB"
    else:
        topo = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 16, "spines": 8,
                "host_link": {"rate": "400Gbps", "delay": "1us"},
                "fabric_link": {"rate": "400Gbps", "delay": "1us"}}
        size = "8MB"
    return {"name": f"perm{name}", "topology": topo,
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": size},
            "routing": routing, "simulation": {"seed": seed}}


class _Counting:
    """Stands in for the routing registry inside the packet engine: builds the policy, then
    wraps its ``choose`` to count, per (queue pair, switch), data packets that repeat the port
    of the flow's previous packet. Reads only; the choice is returned unchanged."""

    def __init__(self, registry):
        self.registry = registry
        self.same = self.total = 0

    def get(self, name):
        cls = self.registry.get(name)
        outer = self

        def build(params, streams):
            pol = cls(params, streams)
            inner = pol.choose
            last: dict = {}

            def choose(switch, ports, pkt, now):
                port = inner(switch, ports, pkt, now)
                if not pkt.kind:
                    key = (pkt.qp.uid, switch.id)
                    prev = last.get(key)
                    if prev is not None:
                        outer.total += 1
                        outer.same += prev is port
                    last[key] = port
                return port
            pol.choose = choose
            return pol
        return build


def run_one(fab: str, label: str, seed: int, out: pathlib.Path) -> dict:
    counting = _Counting(packet_engine.ROUTING)
    packet_engine.ROUTING = counting
    try:
        t0 = time.perf_counter()
        res = fabricsim.run(fabric(fab, POLICIES[label], seed), output_dir=out / f"{fab}_{label}_{seed}")
        wall = time.perf_counter() - t0
    finally:
        packet_engine.ROUTING = counting.registry
    h = res.headline()
    return {"fabric": fab, "policy": label, "seed": seed, "completion_time_ratio": h["completion_time_ratio"],
            "p_same_uplink": counting.same / counting.total if counting.total else None, "wall_s": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fabric", nargs="+", default=["32", "128"], choices=["32", "128"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parent / "results" / "routing.json"))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for fab in args.fabric:
            for label in args.policies:
                for seed in args.seeds:
                    r = run_one(fab, label, seed, pathlib.Path(tmp))
                    rows.append(r)
                    print(f"  {fab:>4} {label:<22} seed {seed}: ratio {r['completion_time_ratio']:.3f}  "
                          f"P(same) {r['p_same_uplink'] if r['p_same_uplink'] is None else round(r['p_same_uplink'], 3)}"
                          f"  {r['wall_s']:.1f} s", flush=True)
    print()
    for fab in args.fabric:
        print(f"fabric {fab} hosts: completion_time_ratio per seed {args.seeds}, mean, P(same uplink)")
        for label in args.policies:
            rs = [r for r in rows if r["fabric"] == fab and r["policy"] == label]
            ratios = [r["completion_time_ratio"] for r in rs]
            ps = [r["p_same_uplink"] for r in rs if r["p_same_uplink"] is not None]
            print(f"  {label:<22} " + " ".join(f"{x:.3f}" for x in ratios) + f"   mean {sum(ratios)/len(ratios):.3f}"
                  + (f"   P(same) {sum(ps)/len(ps):.3f}" if ps else "   P(same) n/a"))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps({"policies": POLICIES, "rows": rows}, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
