"""Capacity planning at scale: a DeepSeek-V3 pre-training plan at 2,048 / 4,096 / 8,192 GPUs on the
GB300 NVL72 + Spectrum-X presets (gb300_2048_4x200g, gb300_4096_4x200g, gb300_8192_4x200g).

One plan with one cluster entry per size, run in this process on one core (``fabricsim.plan``:
every distinct communication pattern simulated once on the flow engine). Target: the three sizes in
under 5 minutes. The wall time of each size (deriving, simulating its new patterns, the step model)
is taken from the plan's progress callback; the total includes building the topologies::

    python3 benchmarks/bench_plan.py                       # 2048 4096 8192, adaptive routing
    python3 benchmarks/bench_plan.py --sizes 2048 --routing ecmp

Writes benchmarks/results/plan.json (with the command, the machine and the rows) and prints the table.
The plan (parallelism TP1 / PP16 / EP32, 8,192 x 4,096-token sequences per step, FP8 dispatch) is
:data:`PLAN`; ``plans/dsv3_gb300.yaml`` is the same plan as a file.
"""
from __future__ import annotations

import argparse
import json
import platform
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192], choices=sorted(PRESETS))
    ap.add_argument("--routing", default="adaptive")
    ap.add_argument("--output", default=str(HERE / "results" / "plan.json"))
    ap.add_argument("--note", default="", help="free text recorded with the results (e.g. 'machine shared')")
    args = ap.parse_args(argv)
    from fabricsim.plan.runner import run_plan
    from fabricsim.plan.spec import load_plan
    from fabricsim.plan.output import format_table
    spec, src = load_plan(plan_dict(args.sizes, args.routing))
    marks: list[tuple[str, float]] = []
    t0 = time.perf_counter()
    cpu0 = time.process_time()

    def progress(text):
        marks.append((text, time.perf_counter()))
        print(f"[{time.perf_counter() - t0:7.1f} s] {text}", flush=True)

    res = run_plan(spec, src, progress=progress)
    total = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    ends = [t for _, t in marks[1:]] + [t0 + total]
    per_size = [{"gpus": r["gpus"], "topology": r["topology"], "wall_s": round(e - t, 2),
                 "patterns_simulated": r["patterns_simulated"]}
                for r, (_, t), e in zip(res.rows, marks, ends)]
    keep = ("gpus", "dp", "microbatches", "step_s", "compute_s", "bubble_s", "exposed_comm_s",
            "ep_dispatch_s", "ep_combine_s", "pp_p2p_s", "dp_reduce_scatter_s", "dp_all_gather_s",
            "tokens_per_s_per_gpu", "scaling_efficiency", "mfu_effective")
    doc = {"command": "python3 benchmarks/bench_plan.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "date": date.today().isoformat(),
           "machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "processor": platform.processor()},
           "note": args.note,
           "target": {"sizes": [2048, 4096, 8192], "wall_s": TARGET_S},
           "wall_s": round(total, 2), "cpu_s": round(cpu, 2),
           "target_met": bool(sorted(args.sizes) == [2048, 4096, 8192] and total < TARGET_S),
           "simulations": res.simulations, "per_size": per_size,
           "rows": [{k: r[k] for k in keep} for r in res.rows],
           "assumptions": {k: v for k, v in res.assumptions.items() if k != "not_modelled"}}
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(format_table(res))
    print(f"wall {total:.1f} s (cpu {cpu:.1f} s), {res.simulations} patterns simulated -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
