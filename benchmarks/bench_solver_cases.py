"""The max-min solver (fabricsim.flows.fluid) before and after, on problem instances captured
from flow-level engine runs.

Each instance is a pickle ``{"F": csr, "V": csr, "cap": float64[L], "active": bool[n]}``: what
the engine passed to ``FluidProblem(F, V, cap).solve(active=active)`` (2,048-GPU DeepSeek-V3 MoE
layer with ECMP paths, and a 512-GPU adaptive run across racks). The pickles are not in the
repository; point ``--cases`` at a directory of them.

Per instance and solver (old = ``benchmarks/_fluid_before.py``, the module as it was before the
speed-up; new = ``fabricsim.flows.fluid`` with ``method="vectorised"``; compiled = the same with
``method="compiled"``, the default, cold: no warm start), minimum over ``--repeat`` runs of:

* ``prepare_s``: ``FluidProblem(F, V, cap)`` (validation, transposes, link restriction);
* ``with_flows_s``: ``prepared.with_flows(F)`` (what the engine does when flows start);
* ``solve_s``: ``prepared.solve(active=active)`` (what it does at every rate recomputation);
* ``step_s``: ``prepared.with_flows(F).solve(active=active)`` (a recomputation after flows
  started: the engine's usual step).

and the largest relative difference of the new rates from the old ones (``inf`` vs ``inf`` and
``0`` vs ``0`` count as equal), plus ``check_max_min`` on the new rates (inactive rows dropped).

    PYTHONPATH=. python benchmarks/bench_solver_cases.py --cases /tmp/scale/solver_cases

Writes ``benchmarks/results/solver_cases.json``.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import pathlib
import pickle
import platform
import sys
import time

import numpy as np
import scipy

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from fabricsim.flows import fluid as new  # noqa: E402


def _load_before():
    spec = importlib.util.spec_from_file_location("_fluid_before", HERE / "_fluid_before.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_fluid_before"] = mod
    spec.loader.exec_module(mod)
    return mod


old = _load_before()


def best(fn, repeat):
    out, ts = None, []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return out, min(ts)


def rel_diff(a, b):
    same = (a == b)
    with np.errstate(invalid="ignore", divide="ignore"):
        d = np.abs(a - b) / np.maximum(np.abs(a), np.abs(b))
    d = np.where(same, 0.0, d)
    d = np.where(np.isnan(d), np.inf, d)
    return float(d.max()) if d.size else 0.0


def run_case(path, repeat):
    with open(path, "rb") as fh:
        c = pickle.load(fh)
    F, V, cap, active = c["F"], c["V"], c["cap"], np.asarray(c["active"], bool)
    row = {"case": path.name, "flows": int(F.shape[0]), "active": int(active.sum()),
           "segments": int(F.shape[1]), "links": int(V.shape[1]),
           "nnz_F": int(F.nnz), "nnz_V": int(V.nnz)}
    res = {}
    for name, mod, kw in (("old", old, {}), ("new", new, {"method": "vectorised"}),
                          ("compiled", new, {"method": "compiled"})):
        prob, t_prep = best(lambda: mod.FluidProblem(F, V, cap), max(2, repeat // 2))
        _, t_wf = best(lambda: prob.with_flows(F), repeat)
        prob.solve(active=active, **kw)               # (the compiled solver: load it once)
        sol, t_solve = best(lambda: prob.solve(active=active, **kw), repeat)
        _, t_step = best(lambda: prob.with_flows(F).solve(active=active, **kw), repeat)
        res[name] = sol
        row[f"{name}_prepare_s"] = round(t_prep, 6)
        row[f"{name}_with_flows_s"] = round(t_wf, 6)
        row[f"{name}_solve_s"] = round(t_solve, 6)
        row[f"{name}_step_s"] = round(t_step, 6)
        row[f"{name}_iterations"] = int(sol.iterations)
    row["max_rel_rate_diff"] = rel_diff(res["old"].rates, res["new"].rates)
    row["compiled_max_rel_rate_diff"] = rel_diff(res["new"].rates, res["compiled"].rates)
    Fa = F[active]
    viol = new.check_max_min(Fa, V, cap, res["new"].rates[active])
    row["check_max_min_violations"] = len(viol)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default="/tmp/scale/solver_cases")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default=str(HERE / "results" / "solver_cases.json"))
    a = ap.parse_args(argv)
    paths = sorted(pathlib.Path(a.cases).glob("*.pkl"))
    if not paths:
        raise SystemExit(f"no *.pkl in {a.cases}")
    rows = []
    for p in paths:
        r = run_case(p, a.repeat)
        rows.append(r)
        print(f"{r['case']:24s} flows {r['flows']:7d} active {r['active']:7d} nnzF {r['nnz_F']:8d} "
              f"solve {r['old_solve_s']*1e3:8.2f} -> {r['new_solve_s']*1e3:7.2f} ms "
              f"step {r['old_step_s']*1e3:8.2f} -> {r['new_step_s']*1e3:7.2f} ms "
              f"with_flows {r['old_with_flows_s']*1e3:7.2f} -> {r['new_with_flows_s']*1e3:6.2f} ms "
              f"prepare {r['old_prepare_s']*1e3:7.2f} -> {r['new_prepare_s']*1e3:6.2f} ms "
              f"compiled solve {r['compiled_solve_s']*1e3:7.2f} ms "
              f"it {r['old_iterations']}->{r['new_iterations']} "
              f"diff {r['max_rel_rate_diff']:.1e} viol {r['check_max_min_violations']}", flush=True)
    tot = {}
    for k in ("solve", "step", "with_flows", "prepare"):
        o = sum(r[f"old_{k}_s"] for r in rows)
        n = sum(r[f"new_{k}_s"] for r in rows)
        c = sum(r[f"compiled_{k}_s"] for r in rows)
        tot[k] = {"old_s": round(o, 6), "new_s": round(n, 6), "speedup": round(o / n, 2),
                  "compiled_s": round(c, 6), "compiled_over_new": round(n / c, 2)}
    res = {"command": " ".join(["PYTHONPATH=. python", "benchmarks/bench_solver_cases.py"]
                               + (argv if argv is not None else sys.argv[1:])),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "processor": platform.processor(),
                       "python": platform.python_version(), "numpy": np.__version__,
                       "scipy": scipy.__version__},
           "timing": f"min of {a.repeat} runs per measurement (prepare: min of {max(2, a.repeat // 2)})",
           "max_rel_rate_diff": max(r["max_rel_rate_diff"] for r in rows),
           "compiled_max_rel_rate_diff": max(r["compiled_max_rel_rate_diff"] for r in rows),
           "check_max_min_violations": sum(r["check_max_min_violations"] for r in rows),
           "totals": tot, "cases": rows}
    for k, v in tot.items():
        print(f"total {k:18s} old {v['old_s']:.4f} s  new (vectorised) {v['new_s']:.4f} s  x{v['speedup']}  "
              f"compiled {v['compiled_s']:.4f} s  (vectorised / compiled x{v['compiled_over_new']})")
    print(f"max rel rate diff {res['max_rel_rate_diff']:.2e}, "
          f"check_max_min violations {res['check_max_min_violations']}")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
