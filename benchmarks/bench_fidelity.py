#!/usr/bin/env python3
"""Fidelity acceptance matrix: the headline comparisons fabricsim exists to show, per seed.

Usage::

    python3 benchmarks/bench_fidelity.py                 # everything, ~10 min; writes results/fidelity.json
    python3 benchmarks/bench_fidelity.py --quick         # seeds 1-2, 32 hosts only
    python3 benchmarks/bench_fidelity.py --only perm128  # one case family
    python3 benchmarks/bench_fidelity.py --only perm32 --setup raw_adaptive_telemetry --seeds 2 \
        --extra '{"congestion_control": {"eta": 0.98}}'   # a variant (writes nothing)

Cases (docs/fidelity.md explains each reference):

``perm32``   the quickstart fabric (4 leaves x 8 hosts, 8 spines, 400G, 500 ns links), 4 MiB
             cross-leaf permutation, seeds 1-5.
``perm128``  16 leaves x 8 hosts, 8 spines, 400G, 1 us links, 8 MB cross-leaf permutation, seeds 1-5.
``a2a128``   the 128-host fabric, 64 KiB all-to-all.
``ecmp_bins`` the ``ethernet`` profile on a low-entropy (one queue pair per message) 128-host
             permutation: the completion ratio, and the fraction of leaf->spine uplinks that carry
             no data against the balls-into-bins expectation (1 - 1/n)^n.

Each run is one set-up from :data:`SETUPS` (a profile or raw policy settings). The figure is the
run's ``completion_time_ratio`` (idle-fabric ideal / measured pattern duration, docs/metrics.md);
for ECMP set-ups the script also computes the fluid max-min reference on the run's own hash
placement (:mod:`fabricsim.analysis.maxmin`) when that reference is available.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import fabricsim

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "fidelity.json"

FABRICS = {
    "perm32": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8,
               "host_link": {"rate": "400Gbps", "delay": "500ns"},
               "fabric_link": {"rate": "400Gbps", "delay": "500ns"}, "switch_latency": "600ns"},
    "perm128": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 16, "spines": 8,
                "host_link": {"rate": "400Gbps", "delay": "1us"},
                "fabric_link": {"rate": "400Gbps", "delay": "1us"}},
}
TRAFFIC = {
    "perm32": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "4MiB", "qps_per_message": 1},
    "perm128": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "8MB", "qps_per_message": 1},
    "a2a128": {"pattern": "all_to_all", "message_size": "64KiB"},
    "ecmp_bins": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "8MB", "qps_per_message": 1},
}
CASE_FABRIC = {"perm32": "perm32", "perm128": "perm128", "a2a128": "perm128", "ecmp_bins": "perm128"}

#: set-up name -> scenario sections laid over the case
SETUPS = {
    "raw_ecmp": {"profile": "none", "routing": {"policy": "ecmp"}},
    "raw_spray": {"profile": "none", "routing": {"policy": "spray"}},
    "raw_adaptive": {"profile": "none", "routing": {"policy": "adaptive"}},
    "raw_adaptive_telemetry": {"profile": "none", "routing": {"policy": "adaptive"},
                               "congestion_control": {"algorithm": "telemetry"}},
    "ethernet": {"profile": "ethernet"},
    "spectrum_x": {"profile": "spectrum_x"},
}
CASE_SETUPS = {
    "perm32": ["raw_ecmp", "raw_spray", "raw_adaptive", "raw_adaptive_telemetry", "ethernet", "spectrum_x"],
    "perm128": ["raw_ecmp", "raw_spray", "raw_adaptive", "raw_adaptive_telemetry", "ethernet", "spectrum_x"],
    "a2a128": ["raw_spray", "raw_adaptive", "spectrum_x"],
    "ecmp_bins": ["ethernet"],
}


def scenario(case: str, setup: str, seed: int, extra: dict | None = None) -> dict:
    """The scenario of one run: the case's fabric and traffic, the set-up, then ``extra`` laid over."""
    from fabricsim.config.profiles import deep_merge
    sc = {"name": f"{case}_{setup}_s{seed}", "topology": dict(FABRICS[CASE_FABRIC[case]]),
          "traffic": dict(TRAFFIC[case]), "simulation": {"seed": seed, "time_limit": "100ms"},
          "outputs": {"formats": ["parquet"], "link_sample_interval": "off"}}
    sc.update(json.loads(json.dumps(SETUPS[setup])))
    return deep_merge(sc, extra) if extra else sc


def idle_uplink_fraction(result) -> float:
    """Fraction of leaf->spine links that carried no data bytes."""
    links = result.links
    leafs = set(links.loc[links.kind == "host-leaf", "dst"])   # host -> leaf links end at leaves
    up = links[(links.kind == "leaf-spine") & links.src.isin(leafs)]
    return float((up.tx_data_bytes == 0).mean())


def run_one(case: str, setup: str, seed: int, outdir: Path, extra: dict | None = None) -> dict:
    sc = scenario(case, setup, seed, extra)
    t0 = time.time()
    r = fabricsim.run(sc, output_dir=outdir / sc["name"])
    wall = time.time() - t0
    s = r.summary
    row = {"case": case, "setup": setup, "seed": seed, "status": s["run"].get("status", s.get("status")),
           "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
           "goodput_fraction": s["effective_bandwidth"]["goodput_fraction"],
           "slowdown_p99": s["slowdown"]["p99"], "drops": s["drops"].get("packets"),
           "events": s["run"].get("events"), "wall_s": round(wall, 2)}
    if case == "ecmp_bins":
        n = FABRICS["perm128"]["spines"]
        row["idle_uplink_fraction"] = idle_uplink_fraction(r)
        row["idle_uplink_expected"] = (1 - 1 / n) ** n
    try:
        from fabricsim.analysis.maxmin import ecmp_fluid_reference
    except ImportError:
        ecmp_fluid_reference = None
    if ecmp_fluid_reference is not None and SETUPS[setup].get("routing", {}).get("policy") in ("ecmp", None) \
            and (setup.endswith("ecmp") or setup == "ethernet"):
        row["fluid_maxmin_ratio"] = ecmp_fluid_reference(sc)["completion_time_ratio"]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="seeds 1-2, perm32 only")
    ap.add_argument("--only", action="append", choices=sorted(CASE_SETUPS), help="case family (repeatable)")
    ap.add_argument("--setup", action="append", choices=sorted(SETUPS), help="only these set-ups (repeatable)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--extra", type=json.loads, default=None, metavar="JSON",
                    help='settings laid over every scenario, e.g. \'{"congestion_control": {"eta": 0.98}}\'')
    ap.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    cases = args.only or (["perm32"] if args.quick else list(CASE_SETUPS))
    seeds = range(1, (2 if args.quick else args.seeds) + 1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            for setup in CASE_SETUPS[case]:
                if args.setup and setup not in args.setup:
                    continue
                for seed in seeds if case != "a2a128" else list(seeds)[:2]:
                    row = run_one(case, setup, seed, Path(tmp), args.extra)
                    rows.append(row)
                    extra = "".join(f" {k}={row[k]:.3f}" for k in ("fluid_maxmin_ratio", "idle_uplink_fraction")
                                    if k in row)
                    print(f"{case:9s} {setup:24s} seed {seed}: ratio {row['completion_time_ratio']:.3f} "
                          f"slowdown_p99 {row['slowdown_p99']:.2f} drops {row['drops']} [{row['status']}] "
                          f"{row['wall_s']}s{extra}", flush=True)
    summary = {}
    for row in rows:
        summary.setdefault(f"{row['case']}/{row['setup']}", []).append(row["completion_time_ratio"])
    print("\nmean completion_time_ratio (min..max):")
    for k, v in summary.items():
        print(f"  {k:36s} {statistics.mean(v):.3f} ({min(v):.3f}..{max(v):.3f})")
    out = {"command": "python3 benchmarks/" + " ".join([Path(__file__).name] + (argv or sys.argv[1:])),
           "python": platform.python_version(), "date": time.strftime("%Y-%m-%d"), "rows": rows,
           "mean_ratio": {k: statistics.mean(v) for k, v in summary.items()}}
    if not args.quick and not args.only and not args.setup and not args.extra:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
