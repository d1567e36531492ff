#!/usr/bin/env python3
"""Telemetry (HPCC-like) congestion control under multipath routing: completion-time ratio per
routing policy x congestion control x seed, on two cross-leaf permutations.

Usage::

    python3 benchmarks/bench_telemetry.py                     # both fabrics, seeds 1-5, writes results/telemetry.json
    python3 benchmarks/bench_telemetry.py --fabrics quickstart --seeds 1 2
    python3 benchmarks/bench_telemetry.py \
        --variant 'paper_stage={"max_stage":5}' \
        --variant 'hpcc={"estimator":"hpcc","rate_interval_rtts":0,"qlen_window_rtts":0,"window_rtt_max":1,"max_stage":5}'
                                                  # the run in results/telemetry.json (about 10 min)

Fabrics:

* ``quickstart``: ``scenarios/leaf_spine_32_raw.yaml`` as shipped (32 hosts, 4 leaves x 8, 8 spines,
  400G, 500 ns links, 4 MiB cross-leaf permutation);
* ``p128``: 128 hosts, 16 leaves x 8, 8 spines, 400G, 1 us links, 8 MB cross-leaf permutation.

For every fabric, routing policy (``--policies``, default ``adaptive spray``) and seed it runs
``congestion_control: none`` and ``telemetry`` with its defaults, plus every ``--variant
NAME=JSON`` (telemetry with those parameters). The acceptance figure is, per fabric x policy, the
worst over seeds and the mean of ``completion_time_ratio(telemetry) - completion_time_ratio(none)``
(``>= -0.02`` wanted). The JSON lists every run's headline plus that summary.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

import fabricsim

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_OUT = HERE / "results" / "telemetry.json"


def fabric(name: str, seed: int, policy: str, cc: dict) -> dict:
    """The scenario dict of fabric ``name`` with routing ``policy``, congestion control ``cc``, ``seed``."""
    if name == "quickstart":
        sc = yaml.safe_load((ROOT / "scenarios" / "leaf_spine_32_raw.yaml").read_text())
    elif name == "p128":
        sc = {"name": "p128",
              "topology": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 16, "spines": 8,
                           "host_link": {"rate": "400Gbps", "delay": "1us"},
                           "fabric_link": {"rate": "400Gbps", "delay": "1us"}},
              "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "8MB"}}
    else:
        raise SystemExit(f"unknown fabric {name!r}")
    sc["routing"] = {"policy": policy}
    sc["congestion_control"] = cc
    sc.setdefault("simulation", {})["seed"] = seed
    sc.pop("outputs", None)
    return sc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fabrics", nargs="+", default=["quickstart", "p128"])
    ap.add_argument("--policies", nargs="+", default=["adaptive", "spray"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=JSON",
                    help="an extra telemetry variant: its parameters as a JSON object")
    ap.add_argument("--no-default", action="store_true", help="skip telemetry with default parameters")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)

    ccs = {"none": {"algorithm": "none"}}
    if not args.no_default:
        ccs["telemetry"] = {"algorithm": "telemetry"}
    for v in args.variant:
        name, _, js = v.partition("=")
        ccs[name] = {"algorithm": "telemetry", **json.loads(js)}

    runs = []
    print(f"{'fabric':<11}{'policy':<10}{'cc':<14}{'seed':>5}{'ratio':>8}{'fct_p99_us':>12}{'peak_q_KB':>11}{'wall_s':>8}")
    for fab in args.fabrics:
        for pol in args.policies:
            for seed in args.seeds:
                for ccname, cc in ccs.items():
                    t0 = time.time()
                    r = fabricsim.run(fabric(fab, seed, pol, cc))
                    h = r.headline()
                    row = {"fabric": fab, "policy": pol, "cc": ccname, "cc_params": cc, "seed": seed,
                           "completion_time_ratio": h["completion_time_ratio"],
                           "goodput_fraction": h["goodput_fraction"], "fct_p99_us": h["fct_p99_us"],
                           "peak_queue_bytes": h["peak_queue_bytes"], "drops": h["drops"],
                           "wall_s": round(time.time() - t0, 2)}
                    runs.append(row)
                    print(f"{fab:<11}{pol:<10}{ccname:<14}{seed:>5}{row['completion_time_ratio']:>8.3f}"
                          f"{row['fct_p99_us']:>12.1f}{row['peak_queue_bytes'] / 1e3:>11.1f}{row['wall_s']:>8.1f}",
                          flush=True)

    summary = []
    print(f"\n{'fabric':<11}{'policy':<10}{'cc':<14}{'mean':>8}{'mean-none':>11}{'worst-none':>12}")
    for fab in args.fabrics:
        for pol in args.policies:
            base = {r["seed"]: r["completion_time_ratio"] for r in runs
                    if r["fabric"] == fab and r["policy"] == pol and r["cc"] == "none"}
            for ccname in ccs:
                mine = {r["seed"]: r["completion_time_ratio"] for r in runs
                        if r["fabric"] == fab and r["policy"] == pol and r["cc"] == ccname}
                d = [mine[s] - base[s] for s in args.seeds]
                mean = sum(mine.values()) / len(mine)
                row = {"fabric": fab, "policy": pol, "cc": ccname, "mean_ratio": mean,
                       "mean_delta_vs_none": sum(d) / len(d), "worst_delta_vs_none": min(d)}
                summary.append(row)
                print(f"{fab:<11}{pol:<10}{ccname:<14}{mean:>8.3f}{row['mean_delta_vs_none']:>+11.3f}"
                      f"{row['worst_delta_vs_none']:>+12.3f}")

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"fabricsim": fabricsim.__version__, "python": sys.version.split()[0],
                                    "argv": sys.argv[1:], "runs": runs, "summary": summary}, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
