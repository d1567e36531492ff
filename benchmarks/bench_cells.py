"""Speed versus fidelity of ``simulation.cell_packets`` on the 128-host benchmark fabric.

Runs the adaptive-routing permutation of bench_packet.py with cells of 1, 2, 4 and 8 MTU packets
and reports MTU-packet-hops per wall second (best of ``--repeat``) next to the mean relative
error of message completion times against the exact (cell 1) run of the same seed.

    python3 benchmarks/bench_cells.py            # ~30 s; writes results/cell_speed.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import fabricsim

SCENARIO = {"name": "bench_cells",
            "topology": {"hosts_per_leaf": 16, "leaves": 8, "spines": 16},
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "4MiB"},
            "routing": {"policy": "adaptive"}, "simulation": {"seed": 1}}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--cells", type=int, nargs="+", default=[1, 2, 4, 8])
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "cell_speed.json")
    args = ap.parse_args(argv)
    rows, base = [], None
    for cell in args.cells:
        best, res = 0.0, None
        for _ in range(args.repeat):
            res = fabricsim.run({**SCENARIO, "simulation": {"seed": 1, "cell_packets": cell}})
            best = max(best, res.summary["run"]["packet_hops_per_s"])
        fct = res.messages["fct_ps"].astype("int64")
        if base is None:
            base = fct
        err = float(((fct - base).abs() / base).mean())
        row = {"cell_packets": cell, "mtu_packet_hops_per_s": best, "mean_fct_rel_error": err,
               "completion_time_ratio": res.summary["effective_bandwidth"]["completion_time_ratio"]}
        rows.append(row)
        print(f"cell_packets={cell}: {best / 1e6:.2f} M MTU-packet-hops/s, mean |FCT error| {err * 100:.2f} %, "
              f"completion ratio {row['completion_time_ratio']:.3f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"command": " ".join(["python3", "benchmarks/bench_cells.py"] + (argv or sys.argv[1:])),
                                     "python": platform.python_version(), "platform": platform.platform(),
                                     "scenario": SCENARIO, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
