"""A 100-point sweep on the processes executor vs a Dask LocalCluster, serial as the baseline.

    python3 benchmarks/bench_sweep.py [--jobs 2] [--points 100] [--repeat 1]

The sweep: a small scenario (16 hosts on a 2-leaf, 4-spine leaf-spine, a cross-leaf permutation,
packet engine) x routing (ecmp, spray, adaptive, flowlet) x message size (5 sizes, 256 KiB -
4 MiB) x 5 seeds = 100 points, each a fraction of a second. Each executor runs the whole sweep into a
fresh folder (nothing resumed), timed from the call to the written summary, executor start-up
included; the start-up alone (an empty imap after start) is timed separately. The tables of
every executor are checked equal to the serial one (wall times aside). Writes
benchmarks/results/sweep.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BASE = {
    "name": "bench-sweep",
    "topology": {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 2, "spines": 4},
    "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "64KiB"},
    "simulation": {"seed": 1, "time_limit": "5ms"},
}
ROUTING = ["ecmp", "spray", "adaptive", "flowlet"]
SIZES = ["256KiB", "512KiB", "1MiB", "2MiB", "4MiB"]


def sweep_doc(points: int) -> dict:
    """The sweep: routing x sizes x seeds, trimmed to about ``points`` points."""
    seeds = max(1, points // (len(ROUTING) * len(SIZES)))
    sizes = SIZES if points >= len(ROUTING) * len(SIZES) else SIZES[:max(1, points // len(ROUTING))]
    return {"name": "bench", "base": BASE, "grid": {"routing": ROUTING, "traffic.message_size": sizes},
            "seeds": seeds}


def make(name: str, jobs: int):
    from fabricsim.sweep.executor import DaskExecutor, make_executor
    if name == "dask":
        return DaskExecutor(jobs=jobs)          # what --executor dask starts: worker processes on loopback
    return make_executor(name, jobs=jobs)


def _warm(x):
    """A task that only imports what a point needs (a worker's first point pays for it)."""
    import fabricsim.api  # noqa: F401
    return x


def startup_s(name: str, jobs: int) -> float:
    """Seconds to start the executor, import fabricsim on each worker (one task per worker) and
    stop it: the fixed cost in a sweep's wall time."""
    t0 = time.perf_counter()
    ex = make(name, jobs)
    ex.start()
    list(ex.imap(_warm, range(ex.workers)))
    ex.close()
    return time.perf_counter() - t0


def main(argv=None) -> int:
    from fabricsim.sweep.runner import run_sweep
    from fabricsim.sweep.spec import parse_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=2, help="workers of processes and dask")
    ap.add_argument("--points", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=1, help="runs per executor (median reported)")
    ap.add_argument("--executors", default="serial,processes,dask")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sweep.json"))
    args = ap.parse_args(argv)
    names = args.executors.split(",")
    doc = sweep_doc(args.points)
    rows, tables = [], {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            walls = []
            for r in range(args.repeat):
                spec = parse_spec(doc, "<bench>")
                t0 = time.perf_counter()
                res = run_sweep(spec, Path(tmp) / f"{name}-{r}", executor=make(name, args.jobs))
                walls.append(time.perf_counter() - t0)
            tables[name] = res.table.drop(columns=["wall_time_s"])
            point_wall = float(res.table["wall_time_s"].sum())
            start = startup_s(name, args.jobs)
            rows.append({"executor": name, "workers": 1 if name == "serial" else args.jobs, "points": len(res.table),
                         "complete": int((res.table["status"] == "complete").sum()),
                         "wall_s": round(statistics.median(walls), 3), "walls_s": [round(w, 3) for w in walls],
                         "points_per_s": round(len(res.table) / statistics.median(walls), 2),
                         "sum_of_point_run_s": round(point_wall, 3), "startup_s": round(start, 3)})
    ref = tables[names[0]]
    for row in rows:
        row["identical_to_" + names[0]] = bool(tables[row["executor"]].equals(ref))
    base = rows[0]["wall_s"]
    for row in rows:
        row["speedup_vs_" + names[0]] = round(base / row["wall_s"], 2)
    print(f"{'executor':<10} {'workers':>7} {'points':>6} {'wall s':>8} {'points/s':>9} {'start-up s':>10} "
          f"{'speedup':>8} identical")
    for r in rows:
        print(f"{r['executor']:<10} {r['workers']:>7} {r['points']:>6} {r['wall_s']:>8.2f} {r['points_per_s']:>9.2f} "
              f"{r['startup_s']:>10.2f} {r['speedup_vs_' + names[0]]:>8.2f} {r['identical_to_' + names[0]]}")
    try:
        import dask
        dask_version = dask.__version__
    except ImportError:
        dask_version = None
    out = {"date": date.today().isoformat(), "python": platform.python_version(), "machine": platform.machine(),
           "cpu_count": os.cpu_count(), "dask": dask_version,
           # the machine may be shared: the 1-minute load average before and after the run
           "loadavg_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)], "sweep": doc, "jobs": args.jobs,
           "repeat": args.repeat, "rows": rows,
           "command": "python3 benchmarks/bench_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(r["identical_to_" + names[0]] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
