"""The flow engine's grouping window (``simulation.flow.group``) against exact recomputation.

For each scenario the flow engine runs with ``group: 0`` (rates recomputed at every flow start
and finish) and with larger windows; reported per window: the error of the pattern duration, of
every operation's time (traces with ``op``), of every message's FCT (from its own release; p99
and max of |fct - fct_exact| / fct_exact) and the largest shift of a completion time as a share of
the pattern's duration, the rate recomputations and the wall time::

    python3 benchmarks/bench_flow_group.py                 # writes benchmarks/results/flow_group.json
    python3 benchmarks/bench_flow_group.py --quick         # the two small scenarios
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import fabricsim  # noqa: E402

GROUPS = [0.0, 0.001, 0.003, 0.01, 0.03]


def scenarios(quick: bool, cache: Path):
    out = [
        ("all_to_all 32 hosts 64KiB, ecmp",
         {"name": "a2a", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8},
          "traffic": {"pattern": "all_to_all", "message_size": "64KiB"}, "routing": {"policy": "ecmp"}}),
        ("DSV3 MoE layer, 64 GPUs (HGX), adaptive",
         {"_file": str(ROOT / "scenarios" / "moe_dsv3_64gpu_flat.yaml")}),
    ]
    big = cache / "dsv3_512.parquet"
    if not quick and big.exists():
        out.append(("DSV3 MoE layer, 512 GPUs (GB300 NVL72), ecmp",
                    {"name": "dsv3_512", "topology": {"kind": "file", "path": str(ROOT / "topologies" /
                                                                                  "gb300_2048_4x200g.yaml")},
                     "traffic": {"pattern": "trace", "path": str(big)}, "routing": {"policy": "ecmp"}}))
    return out


def run(sc, group):
    t0 = time.perf_counter()
    if "_file" in sc:
        r = fabricsim.run(sc["_file"], overrides=["simulation.engine=flow", f"simulation.flow.group={group}",
                                                  "outputs.link_sample_interval=off"])
    else:
        r = fabricsim.run({**sc, "simulation": {"engine": "flow", "flow": {"group": group}},
                           "outputs": {"link_sample_interval": "off"}})
    return r, time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cache", type=Path, default=Path("/tmp/fabricsim_bench_traces"),
                    help="where bench_flow_scale.py keeps its traces (the 512-GPU case runs if present)")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "flow_group.json")
    args = ap.parse_args(argv)
    rows = []
    for name, sc in scenarios(args.quick, args.cache):
        exact, wall0 = run(sc, 0.0)
        e_end = exact.messages["end_ps"].astype("float64").to_numpy()
        e_rel = exact.messages["release_ps"].astype("float64").to_numpy()
        e_ops = exact.collectives.set_index("op")["time_ps"].astype("float64") if len(exact.collectives) else None
        d0 = exact.summary["pattern"]["duration_ps"]
        for g in GROUPS:
            if g == 0.0:
                r, wall = exact, wall0
            else:
                r, wall = run(sc, g)
            end = r.messages["end_ps"].astype("float64").to_numpy()
            rel = r.messages["release_ps"].astype("float64").to_numpy()
            # a message's own FCT (from its own release, which moves with its dependencies)
            err = np.abs((end - rel) - (e_end - e_rel)) / np.maximum(e_end - e_rel, 1)
            shift = np.abs(end - e_end) / d0
            row = {"scenario": name, "group": g, "messages": len(end),
                   "duration_ps": r.summary["pattern"]["duration_ps"],
                   "duration_rel_error": (r.summary["pattern"]["duration_ps"] - d0) / d0,
                   "message_fct_rel_error_p99": float(np.percentile(err, 99)),
                   "message_fct_rel_error_max": float(err.max()),
                   "message_end_shift_over_duration_max": float(shift.max()),
                   "rate_recomputations": r.summary["run"]["flow_rate_recomputations"],
                   "wall_s": wall, "engine_wall_s": r.summary["run"]["wall_time_s"]}
            if e_ops is not None:
                ops = r.collectives.set_index("op")["time_ps"].astype("float64")
                row["op_time_rel_error_max"] = float(((ops - e_ops).abs() / e_ops).max())
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = {"command": "python3 benchmarks/bench_flow_group.py" + (" --quick" if args.quick else ""),
           "date": date.today().isoformat(),
           "machine": {"python": platform.python_version(), "platform": platform.platform()}, "cases": rows}
    if not args.quick:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
    print("\n| scenario | group | duration error | op time error (max) | message FCT error p99 / max | "
          "largest end shift / duration | recomputations | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        op = r.get("op_time_rel_error_max")
        print(f"| {r['scenario']} | {r['group']} | {100 * r['duration_rel_error']:+.2f} % | "
              f"{'n/a' if op is None else f'{100 * op:.2f} %'} | {100 * r['message_fct_rel_error_p99']:.2f} % / "
              f"{100 * r['message_fct_rel_error_max']:.2f} % | {100 * r['message_end_shift_over_duration_max']:.2f} % | "
              f"{r['rate_recomputations']} | {r['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
