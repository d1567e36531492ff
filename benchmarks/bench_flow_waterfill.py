"""Flow-level adaptive routing against the packet engine where the split in proportion to capacity is
wrong: fabrics where some candidate links of an adaptive switch carry other load.

Each case is an explicit leaf-spine (400G, 500 ns links, unbounded buffers) with 2 MiB messages,
all released at 0, routing ``adaptive`` (defaults: graded local queue, remote reports). The packet
engine runs as in benchmarks/bench_flow_validation.py (no congestion control, lossless by unbounded
buffers); the flow engine runs the exact fluid model (``simulation.flow.group: 0``) with the adaptive
split ``proportional`` and ``waterfill`` (``simulation.flow.adaptive``). Cases:

- ``hot_downlink``: leaf0 (h0-h3), leaf1 (h4-h7), spines s0-s3; h8 hangs off s3 and sends to h4, so
  s3's downlink to leaf1 carries load leaf0 cannot see locally; h0-h2 send to h5-h7
  (tests/test_adaptive_routing.py's case);
- ``hot_uplink``: h8 under leaf0 sends to h9, which hangs off s3: leaf0's uplink to s3 carries a
  single-path flow beside h0-h3 -> h4-h7 (five flows over four uplinks);
- ``partial_leaf``: leaf2 (h8, h9) is wired to s0 and s1 only and sends to h6, h7; h0, h1 send to
  h4, h5: the downlinks s0, s1 -> leaf1 carry leaf2's traffic;
- ``degraded_link``: three leaves of four hosts; the s3-leaf1 link runs at 200G; h0, h1 -> leaf1,
  h2, h3 -> leaf2 (leaf0's uplink to s0 is under-used by the leaf1-bound split);
- ``failed_link``: the same with the s0-leaf1 link missing;
- ``incast_symmetric`` (control): 4 x 4 leaf-spine, hosts 1-7 send to host 0 and hosts 8-15 a
  cross-leaf permutation among themselves: symmetric, the proportional split is already balanced;
- ``cluster_{permutation,a2a,moe}`` (``--cluster``): a 128-GPU rail-optimised cluster (16 nodes of 8
  GPUs, no NVLink, one 400G NIC each, 8 rails, 4 spines, unbounded buffers) with failed links
  (p0.leaf0-p0.spine0 all, p0.leaf3-p0.spine2 and p0.leaf5-p0.spine1 one each): a 4 MiB
  permutation (seeded), a 64 KiB all-to-all, a DeepSeek-V3 MoE layer (EP128, 64 tokens per GPU,
  ``fabricsim trace moe``); ``..._nofail`` the same without failures (the fluid's own error).

``--tolerance`` times the flow engine alone on ``cluster_moe`` (exact fluid, 20,000 rate
recomputations) for several ``simulation.flow.waterfill_tolerance``, against the smallest.

    PYTHONPATH=. python benchmarks/bench_flow_waterfill.py [--only NAME ...] [--seeds 1 2 3] [--cluster]
    PYTHONPATH=. python benchmarks/bench_flow_waterfill.py --tolerance

Writes benchmarks/results/flow_waterfill.json (``--tolerance``: flow_waterfill_tolerance.json) and
prints a markdown table.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import fabricsim

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "flow_waterfill.json"
SIZE = 2 * 2**20
LINK = {"rate": "400Gbps", "delay": "500ns"}


def _fabric(leaves: int, hosts_per_leaf: int, spines: int, extra=(), skip=(), rates=None):
    """Explicit leaf-spine: ``leaves`` x ``hosts_per_leaf`` hosts h0.. (leaf-major), ``spines`` spines,
    one link per leaf-spine pair except ``skip`` ((leaf, spine) pairs), ``rates`` ({(leaf, spine):
    rate}); ``extra`` hosts ``(name, switch)`` appended after the leaf hosts."""
    rates = rates or {}
    n = leaves * hosts_per_leaf
    nodes = ([{"name": f"h{i}", "type": "host"} for i in range(n)]
             + [{"name": name, "type": "host"} for name, _sw in extra]
             + [{"name": f"leaf{i}", "type": "switch", "tier": 1} for i in range(leaves)]
             + [{"name": f"s{i}", "type": "switch", "tier": 2} for i in range(spines)])
    links = [{"a": f"h{i}", "b": f"leaf{i // hosts_per_leaf}", **LINK} for i in range(n)]
    links += [{"a": name, "b": sw, **LINK} for name, sw in extra]
    links += [{"a": f"leaf{a}", "b": f"s{s}", **LINK, "rate": rates.get((a, s), LINK["rate"])}
              for a in range(leaves) for s in range(spines) if (a, s) not in skip]
    return {"kind": "explicit", "nodes": nodes, "links": links, "switch_latency": "600ns",
            "buffer": {"size": "unbounded"}}


#: case -> (topology, [(src, dst), ...]) with host ids in listing order
CASES = {
    "hot_downlink": (_fabric(2, 4, 4, extra=[("h8", "s3")]), [(8, 4), (0, 5), (1, 6), (2, 7)]),
    "hot_uplink": (_fabric(2, 4, 4, extra=[("h8", "leaf0"), ("h9", "s3")]),
                   [(8, 9), (0, 4), (1, 5), (2, 6), (3, 7)]),
    "partial_leaf": (_fabric(3, 4, 4, skip=[(2, 2), (2, 3)]), [(8, 6), (9, 7), (0, 4), (1, 5)]),
    "degraded_link": (_fabric(3, 4, 4, rates={(1, 3): "200Gbps"}), [(0, 4), (1, 5), (2, 8), (3, 9)]),
    "failed_link": (_fabric(3, 4, 4, skip=[(1, 0)]), [(0, 4), (1, 5), (2, 8), (3, 9)]),
    "incast_symmetric": (_fabric(4, 4, 4), [(i, 0) for i in range(1, 8)]
                         + [(8 + i, 8 + (i + 4) % 8) for i in range(8)]),
}


FAILED = {"links": [["p0.leaf0", "p0.spine0"], ["p0.leaf3", "p0.spine2", 1], ["p0.leaf5", "p0.spine1", 1]]}


def _cluster(failed=True) -> dict:
    return {"kind": "cluster", "domain": "none", "nodes": 16, "rails": 8, "spines": 4,
            "nic": {"ports": 1, "rate": "400Gbps"}, "switch": {"buffer": {"size": "unbounded"}},
            **({"failed": FAILED} if failed else {})}


def _moe_trace(tmp: Path) -> str:
    path = tmp / "moe128.parquet"
    if not path.exists():
        args = ["trace", "moe", "-o", str(path), "--preset", "deepseek-v3", "--gpus", "128", "--ep-size", "128",
                "--gpus-per-node", "8", "--tokens-per-gpu", "64", "--layers", "1", "--seed", "1"]
        subprocess.run([sys.executable, "-c", "from fabricsim.cli import main; main()", *args], check=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True)
    return str(path)


#: the larger cases (--cluster): case -> (topology, traffic(tmp))
CLUSTER_CASES = {
    f"cluster_{name}{tag}": (_cluster(failed), traffic)
    for failed, tag in ((True, ""), (False, "_nofail"))
    for name, traffic in (("permutation", lambda tmp: {"pattern": "permutation", "message_size": "4MiB"}),
                          ("a2a", lambda tmp: {"pattern": "all_to_all", "message_size": "64KiB"}),
                          ("moe", lambda tmp: {"pattern": "trace", "path": _moe_trace(tmp)}))}


def scenario(case: str, engine: str, tmp: Path, seed: int = 1, adaptive: str | None = None, **flow) -> dict:
    if case in CLUSTER_CASES:
        topo, traffic = CLUSTER_CASES[case]
        traffic = traffic(tmp)
    else:
        topo, pairs = CASES[case]
        path = tmp / f"{case}.csv"
        if not path.exists():
            rows = ["id,src,dst,size_bytes,start_ps"] + [f"{i},{s},{d},{SIZE},0" for i, (s, d) in enumerate(pairs)]
            path.write_text("\n".join(rows) + "\n")
        traffic = {"pattern": "csv", "path": str(path)}
    sim = {"seed": seed, "engine": engine, "time_limit": "100ms"}
    if engine == "flow":
        sim["flow"] = {"group": 0, **({"adaptive": adaptive} if adaptive else {}), **flow}
    return {"name": case, "topology": topo, "traffic": traffic, "routing": {"policy": "adaptive"}, "simulation": sim}


def figures(res) -> dict:
    m = res.messages
    fct = m.loc[m.completed, "fct_ps"].astype(float)
    return {"completion_time_ratio": res.summary["effective_bandwidth"]["completion_time_ratio"],
            "end_ps": int(res.summary["run"]["end_ps"]), "fct_ps": [int(x) for x in fct],
            "status": res.summary["run"]["status"],
            "counters": {k: v for k, v in res.summary["run"].items()
                         if k.startswith("flow_waterfill") or k == "flow_rate_recomputations"}}


def fct_errors(f, p) -> dict:
    """Per message, flow FCT / packet FCT - 1: mean, mean and 90th percentile of its magnitude, max."""
    e = np.asarray(f, dtype=float) / np.asarray(p, dtype=float) - 1
    return {"mean": float(e.mean()), "mean_abs": float(np.abs(e).mean()),
            "p90_abs": float(np.quantile(np.abs(e), 0.9)), "max_abs": float(np.abs(e).max())}


def rel(a, b):
    return None if a is None or not b else (a - b) / b


def run_case(case: str, tmp: Path, seed: int, models) -> dict:
    out = {"case": case, "seed": seed}
    t0 = time.perf_counter()
    out["packet"] = figures(fabricsim.run(scenario(case, "packet", tmp, seed)))
    out["packet"]["wall_s"] = round(time.perf_counter() - t0, 3)
    for model in models:
        t0 = time.perf_counter()
        f = figures(fabricsim.run(scenario(case, "flow", tmp, seed, model)))
        f["wall_s"] = round(time.perf_counter() - t0, 3)
        p = out["packet"]
        f["ctr_diff"] = rel(f["completion_time_ratio"], p["completion_time_ratio"])
        f["fct_diff"] = fct_errors(f["fct_ps"], p["fct_ps"])
        f["fct_diff_max_abs"] = f["fct_diff"]["max_abs"]
        if len(f["fct_ps"]) > 64:                      # (the large cases: the summary only)
            del f["fct_ps"]
        out[model or "default"] = f
    if len(out["packet"]["fct_ps"]) > 64:
        del out["packet"]["fct_ps"]
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="cases to run (default all)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--models", nargs="+", default=["proportional", "waterfill"],
                    help="simulation.flow.adaptive values to run ('' = the engine's default)")
    ap.add_argument("--cluster", action="store_true", help="also the 128-GPU cluster cases (about 5 min)")
    ap.add_argument("--tolerance", action="store_true", help="the tolerance sweep on cluster_moe instead")
    ap.add_argument("--output", default=None)
    a = ap.parse_args(argv)
    if a.tolerance:
        return tolerance_sweep(Path(a.output or OUT.with_name("flow_waterfill_tolerance.json")), argv)
    a.output = a.output or str(OUT)
    models = [m or None for m in a.models]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for case in list(CASES) + (list(CLUSTER_CASES) if a.cluster else []):
            if a.only and case not in a.only:
                continue
            for seed in a.seeds:
                r = run_case(case, Path(d), seed, models)
                rows.append(r)
                print(json.dumps({"case": case, "seed": seed, "packet": r["packet"]["completion_time_ratio"],
                                  **{m or "default": (r[m or "default"]["completion_time_ratio"],
                                                      r[m or "default"]["ctr_diff"]) for m in models}}), flush=True)
    doc = {"command": "PYTHONPATH=. python benchmarks/bench_flow_waterfill.py " + " ".join(argv or sys.argv[1:]),
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
           "cases": rows}
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(table(rows, models))
    return doc


def table(rows, models) -> str:
    head = "| case | seed | CTR packet | " + " | ".join(
        f"CTR flow {m} | diff | FCT diff mean / p90 / max abs" for m in models) + " |"
    lines = [head, "|" + "---|" * (3 + 3 * len(models))]
    for r in rows:
        cells = [r["case"], str(r["seed"]), f"{r['packet']['completion_time_ratio']:.3f}"]
        for m in models:
            f = r[m or "default"]
            e = f["fct_diff"]
            cells += [f"{f['completion_time_ratio']:.3f}", f"{100 * f['ctr_diff']:+.1f}%",
                      f"{100 * e['mean_abs']:.1f} / {100 * e['p90_abs']:.1f} / {100 * e['max_abs']:.1f}%"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def tolerance_sweep(out: Path, argv) -> dict:
    """The flow engine alone on cluster_moe: wall time and message times for several tolerances
    (and proportional), each against the smallest tolerance's."""
    rows, ref = [], None
    with tempfile.TemporaryDirectory() as d:
        for model, tol in (("waterfill", 1e-5), ("waterfill", 1e-4), ("waterfill", 1e-3), ("waterfill", 3e-3),
                           ("waterfill", 1e-2), ("waterfill", 3e-2), ("proportional", None)):
            flow = {"waterfill_tolerance": tol} if tol else {}
            t0 = time.perf_counter()
            res = fabricsim.run(scenario("cluster_moe", "flow", Path(d), 1, model, **flow))
            wall = time.perf_counter() - t0
            fct = res.messages.fct_ps.to_numpy().astype(float)
            ref = fct if ref is None else ref
            e = np.abs(fct / ref - 1)
            row = {"adaptive": model, "tolerance": tol, "wall_s": round(wall, 2),
                   "completion_time_ratio": res.summary["effective_bandwidth"]["completion_time_ratio"],
                   "fct_vs_smallest_max": float(e.max()), "fct_vs_smallest_mean": float(e.mean()),
                   **figures(res)["counters"]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    doc = {"command": "PYTHONPATH=. python benchmarks/bench_flow_waterfill.py " + " ".join(argv or sys.argv[1:]),
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count()},
           "rows": rows}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


if __name__ == "__main__":
    main()
