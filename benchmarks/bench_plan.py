"""Capacity planning at scale: a DeepSeek-V3 pre-training plan at 2,048 / 4,096 / 8,192 GPUs on the
GB300 NVL72 + Spectrum-X presets (gb300_2048_4x200g, gb300_4096_4x200g, gb300_8192_4x200g).

One plan with one cluster entry per size, per routing policy, run in this process on one core
(``fabricsim.plan``: every distinct communication pattern simulated once on the flow engine).
Target: the three sizes in under 5 minutes (one plan). The wall time of each plan includes building
the topologies; the simulation time of each size is taken from the plan's progress callback::

    python3 benchmarks/bench_plan.py                       # 2048 4096 8192; adaptive, then ecmp
    python3 benchmarks/bench_plan.py --sizes 2048 --routing ecmp

Writes benchmarks/results/plan.json (with the command, the machine and the rows) and prints the table.
The plan (parallelism TP1 / PP16 / EP32, 8,192 x 4,096-token sequences per step, FP8 dispatch) is
:data:`PLAN`; ``plans/dsv3_gb300.yaml`` is the same plan as a file.
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from datetime import date
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

PRESETS = {2048: "gb300_2048_4x200g", 4096: "gb300_4096_4x200g", 8192: "gb300_8192_4x200g"}
TARGET_S = 300.0


def plan_dict(sizes, routing: str) -> dict:
    import yaml
    d = yaml.safe_load((ROOT / "plans" / "dsv3_gb300.yaml").read_text())
    d["clusters"] = [{"topology": PRESETS[n]} for n in sizes]
    d["fabric"] = dict(d.get("fabric", {}), routing=routing)
    return d


def run_one(sizes, routing: str) -> dict:
    from fabricsim.plan.output import format_table
    from fabricsim.plan.runner import run_plan
    from fabricsim.plan.spec import load_plan
    spec, src = load_plan(plan_dict(sizes, routing))
    marks: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    def progress(text):
        marks.append((text, time.perf_counter()))
        print(f"[{routing} {time.perf_counter() - t0:7.1f} s] {text}", flush=True)

    res = run_plan(spec, src, progress=progress)
    total = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    # each topology's distinct patterns are simulated between its "simulating" mark and the next mark
    times = [t for _, t in marks] + [t0 + total]
    sim_s = {text.split(":")[0]: round(times[i + 1] - t, 2) for i, (text, t) in enumerate(marks)
             if "simulating" in text}
    per_size = [{"gpus": r["gpus"], "topology": r["topology"], "simulate_wall_s": sim_s.get(r["topology"]),
                 "patterns_simulated": r["patterns_simulated"]} for r in res.rows]
    keep = ("gpus", "dp", "microbatches", "step_s", "compute_s", "bubble_s", "exposed_comm_s",
            "ep_dispatch_s", "ep_combine_s", "pp_p2p_s", "dp_reduce_scatter_s", "dp_all_gather_s",
            "ep_dispatch_exposed_s", "ep_combine_exposed_s", "pp_p2p_exposed_s", "dp_reduce_scatter_exposed_s",
            "dp_all_gather_exposed_s", "tokens_per_s_per_gpu", "scaling_efficiency",
            "perfect_fabric_scaling_efficiency", "fabric_efficiency", "mfu_effective", "ep_dispatch_bytes_per_gpu",
            "time_to_budget_s")
    print(format_table(res))
    print(f"{routing}: wall {total:.1f} s (cpu {cpu:.1f} s), {res.simulations} patterns simulated in "
          f"{res.runs} engine runs")
    return {"routing": routing, "wall_s": round(total, 2), "cpu_s": round(cpu, 2),
            "simulations": res.simulations, "engine_runs": res.runs, "per_size": per_size,
            "rows": [{k: r[k] for k in keep} for r in res.rows],
            "assumptions": {k: v for k, v in res.assumptions.items() if k != "not_modelled"}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192], choices=sorted(PRESETS))
    ap.add_argument("--routing", nargs="+", default=["adaptive", "ecmp"],
                    help="one plan per routing policy (the target is timed on each)")
    ap.add_argument("--output", default=str(HERE / "results" / "plan.json"))
    ap.add_argument("--note", default="", help="free text recorded with the results (e.g. 'machine shared')")
    args = ap.parse_args(argv)
    runs = [run_one(args.sizes, r) for r in args.routing]
    full = sorted(args.sizes) == [2048, 4096, 8192]
    given = argv if argv is not None else sys.argv[1:]
    doc = {"command": shlex.join(["python3", "benchmarks/bench_plan.py", *given]),
           "date": date.today().isoformat(),
           "machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "processor": platform.processor()},
           "note": args.note,
           "target": {"sizes": [2048, 4096, 8192], "wall_s": TARGET_S, "per": "one plan (one routing policy)"},
           "target_met": bool(full and all(r["wall_s"] < TARGET_S for r in runs)),
           "runs": runs}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
