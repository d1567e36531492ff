"""``build_result`` at cluster scale: one DeepSeek-V3 MoE layer (EP 64) run with the flow engine
on 512 / 2048 / 8192 GB300 GPUs, its results built by the columnar analysis (this tree) and, for
comparison, by the former per-message analysis (``--old-src``: a tree of fabricsim before the
change, e.g. ``git archive b3cbbec fabricsim | tar -x -C /tmp/old``), on the same engine output;
with a baseline measured in the same run (np.sort of as many int64s as there are dependency
edges, and as messages).

    PYTHONPATH=. python benchmarks/bench_analysis_scale.py \\
        --case 512=/tmp/an/moe512.yaml --case 2048=/tmp/an/moe2048.yaml --case 8192=/tmp/an/moe8192.yaml \\
        [--old-src /tmp/an/oldsrc] [--old-max 300000] [--inputs /tmp/an]

Each scenario is run once (engine output pickled as ``<inputs>/<name>.pkl``, reused if present);
each build is timed in a fresh subprocess that loads the pickle (peak RSS above the loaded input
recorded), and the two builds' summaries (less wall times), messages and collectives tables are
compared (pandas hashes). Writes benchmarks/results/analysis_scale.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pickle
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, pickle, resource, sys, time
import pandas as pd
from fabricsim.analysis import result as R
d = pickle.load(open(sys.argv[1], "rb"))
gc.collect()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
import os
rss0 = int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
t = time.perf_counter()
r = R.build_result(d["sim"], d["rec"], d["out"], d["wall"], d["ver"])
wall = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
s = json.loads(R.summary_json(r.summary))
s["run"].pop("wall_time_s", None)
s["run"].pop("events_per_s", None)
s["run"].pop("packet_hops_per_s", None)
h = lambda df: int(pd.util.hash_pandas_object(df.astype(str), index=True).sum() % (1 << 62))
print(json.dumps({"build_result_s": wall, "peak_rss_above_input_mb": max(peak * 1024 - rss0, 0) / 2**20,
                  "summary": s, "messages_hash": h(r.messages), "collectives_hash": h(r.collectives)}))
"""


def capture(scenario: str, pkl: Path) -> dict:
    """Run ``scenario`` once and pickle what build_result is given."""
    import fabricsim
    import fabricsim.api as api
    seen = {}
    orig = api.build_result

    def keep(sim, recorder, outcome, wall, version):
        seen["args"] = (sim, recorder, outcome, wall, version)
        return orig(sim, recorder, outcome, wall, version)
    api.build_result = keep
    try:
        t = time.perf_counter()
        fabricsim.run(scenario)
        run_s = time.perf_counter() - t
    finally:
        api.build_result = orig
    sim, rec, out, wall, ver = seen["args"]
    with open(pkl, "wb") as f:
        pickle.dump({"sim": sim, "rec": rec, "out": out, "wall": wall, "ver": ver}, f, protocol=5)
    return {"run_s": run_s}


def child(pkl: Path, src: Path, timeout: float) -> dict | None:
    env = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    try:
        p = subprocess.run([sys.executable, "-c", CHILD, str(pkl)], env=env, capture_output=True, text=True, cwd=src,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"timeout_s": timeout}
    if p.returncode:
        return {"error": p.stderr[-2000:]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def sort_s(n: int) -> float:
    x = np.random.default_rng(0).integers(0, 1 << 40, n)
    t = time.perf_counter()
    np.sort(x)
    return time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", action="append", required=True, help="NAME=scenario.yaml")
    ap.add_argument("--old-src", default=None, help="a tree holding the former fabricsim package")
    ap.add_argument("--old-max", type=int, default=300_000, help="skip the former code above this many messages")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--inputs", default="/tmp")
    ap.add_argument("-o", "--output", default=str(ROOT / "benchmarks/results/analysis_scale.json"))
    args = ap.parse_args(argv)
    out = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "numpy": np.__version__, "cpus": os.cpu_count(),
           "note": "build_result on the flow engine's output of one DSV3 MoE layer (EP 64); "
                   "'old' = the per-message analysis before the columnar change, same input",
           "cases": {}}
    for spec in args.case:
        name, scenario = spec.split("=", 1)
        pkl = Path(args.inputs) / f"bench_analysis_{name}.pkl"
        row: dict = {"scenario": scenario}
        if not pkl.exists():
            row.update(capture(scenario, pkl))
        with open(pkl, "rb") as f:
            d = pickle.load(f)
        t = d["sim"].messages
        n, e = len(t), int(t.dep_ptr[-1]) if hasattr(t, "dep_ptr") else sum(len(m.deps) for m in t)
        del d
        row.update(messages=n, dependency_edges=e, baseline_np_sort_edges_s=sort_s(e),
                   baseline_np_sort_messages_s=sort_s(n))
        new = child(pkl, ROOT, args.timeout)
        row["new"] = {k: v for k, v in new.items() if k not in ("summary", "messages_hash", "collectives_hash")}
        if args.old_src and n <= args.old_max:
            old = child(pkl, Path(args.old_src).resolve(), args.timeout)
            row["old"] = {k: v for k, v in old.items() if k not in ("summary", "messages_hash", "collectives_hash")}
            if "summary" in old and "summary" in new:
                row["identical"] = all(old[k] == new[k] for k in ("summary", "messages_hash", "collectives_hash"))
                row["identical_parts"] = {k: old[k] == new[k] for k in ("summary", "messages_hash", "collectives_hash")}
                row["speedup"] = old["build_result_s"] / new["build_result_s"]
        if "summary" in new:
            row["ideal_duration_ps"] = new["summary"]["pattern"]["ideal_duration_ps"]
            row["new_hashes"] = {"messages": new["messages_hash"], "collectives": new["collectives_hash"]}
        print(name, json.dumps(row), flush=True)
        out["cases"][name] = row
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
