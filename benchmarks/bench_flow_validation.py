"""Cross-validation of the flow (fluid) engine against the packet engine.

Runs a matrix of scenarios both engines run (permutation, all-to-all, incast, DeepSeek-V3 MoE
dispatch + combine, ring all-reduce) on a leaf-spine fabric and on a two-rack NVL72 cluster, with
ecmp, spray and adaptive routing, on both engines, and compares

- ``effective_bandwidth.completion_time_ratio`` and ``goodput_fraction`` (summary), and
- per-operation completion times (``Result.collectives.time_ps``, traces with ops),

with the wall time of each engine. Writes ``benchmarks/results/flow_validation.json`` and prints
a markdown table (docs/fidelity/flow.md holds the analysis).

Packet runs are configured as the fluid assumptions intend: lossless (unbounded buffers, so no
drops or retransmissions), no congestion control (``cc: none``, the default: senders at line
rate, switch FIFOs share the bottlenecks), ``routing.policy`` as named. ``--profile`` runs the
adaptive cases with ``profile: spectrum_x`` instead (telemetry CC, PFC, graded adaptive routing).

    PYTHONPATH=. python benchmarks/bench_flow_validation.py [--quick] [--only SUBSTRING]
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

import fabricsim

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "flow_validation.json"

# ---------------------------------------------------------------------------------------------
# topologies

LEAF_SPINE = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8,
              "host_link": {"rate": "400Gbps", "delay": "150ns"},
              "fabric_link": {"rate": "400Gbps", "delay": "500ns"}, "switch_latency": "600ns",
              "buffer": {"size": "unbounded"}}
# two NVL72 racks (144 GPUs), one 400G NIC per GPU into a rail-optimised leaf-spine
# (switch buffers unbounded: the cluster default, a finite buffer, drops under ECMP collisions)
NVL72_CLUSTER = {"kind": "cluster", "domain": "nvl72", "racks": 2, "nic": {"ports": 1, "rate": "400Gbps"},
                 "switch": {"buffer": {"size": "unbounded"}}}

TOPOLOGIES = {"ls32": (LEAF_SPINE, 32), "nvl72x2": (NVL72_CLUSTER, 144)}


def _trace(kind: str, gpus: int, tmp: Path, ranks: str = "") -> str:
    """Generate (once) a trace file with the fabricsim CLI; returns its path."""
    path = tmp / f"{kind}_{gpus}_{ranks.replace(',', '_')}.parquet"
    if path.exists():
        return str(path)
    if kind == "moe":
        args = ["trace", "moe", "-o", str(path), "--preset", "deepseek-v3", "--gpus", str(gpus),
                "--ep-size", str(gpus), "--gpus-per-node", "8" if gpus <= 64 else "72",
                "--tokens-per-gpu", "32", "--layers", "1", "--seed", "1"]
    elif kind == "ring":
        args = ["trace", "collective", "-o", str(path), "--kind", "allreduce", "--ranks", ranks or f"0-{gpus - 1}",
                "--size", "16MiB" if gpus <= 32 else "8MiB", "--repeat", "2", "--gap", "2us"]
    else:
        raise ValueError(kind)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", "from fabricsim.cli import main; main()", *args], check=True,
                   env=env, capture_output=True)
    return str(path)


def traffic(name: str, gpus: int, tmp: Path) -> dict:
    if name == "permutation":
        return {"pattern": "permutation", "message_size": "2MiB"}
    if name == "all_to_all":
        return {"pattern": "all_to_all", "message_size": "64KiB" if gpus <= 32 else "16KiB"}
    if name == "incast":
        return {"pattern": "incast", "senders": 8, "receiver": 0, "message_size": "512KiB"}
    if name == "moe":
        return {"pattern": "trace", "path": _trace("moe", 32 if gpus <= 32 else 128, tmp)}
    if name == "ring":
        # leaf-spine: all 32 hosts; NVL72 cluster: 8 GPUs of each rack (the ring crosses scale-out twice)
        if gpus <= 32:
            return {"pattern": "trace", "path": _trace("ring", gpus, tmp)}
        return {"pattern": "trace", "path": _trace("ring", 16, tmp, ranks="0-7,72-79")}
    raise ValueError(name)


def matrix(quick: bool):
    cases = []
    for topo in ("ls32", "nvl72x2"):
        pats = ["permutation", "all_to_all", "incast", "moe", "ring"]
        for pat in pats:
            for policy in ("ecmp", "spray", "adaptive"):
                if quick and (topo != "ls32" or pat in ("moe", "all_to_all")):
                    continue
                cases.append((topo, pat, policy))
    return cases


def scenario(topo: str, pat: str, policy: str, engine: str, tmp: Path, seed: int = 1, profile: bool = False):
    t, gpus = TOPOLOGIES[topo]
    sc = {"name": f"{topo}-{pat}-{policy}", "topology": t, "traffic": traffic(pat, gpus, tmp),
          "routing": {"policy": policy}, "simulation": {"seed": seed, "engine": engine, "time_limit": "100ms",
                                                       # the table is the exact fluid model (no grouping window)
                                                       **({"flow": {"group": 0}} if engine == "flow" else {})}}
    if profile and policy == "adaptive" and engine == "packet":
        sc["profile"] = "spectrum_x"
        del sc["routing"]
    return sc


def figures(res) -> dict:
    eb = res.summary["effective_bandwidth"]
    ops = {}
    c = res.collectives
    if c is not None and len(c):
        ops = {str(r.op): (None if r.time_ps is None or r.time_ps != r.time_ps else int(r.time_ps))
               for r in c.itertuples()}
    m = res.messages
    return {"completion_time_ratio": eb["completion_time_ratio"], "goodput_fraction": eb["goodput_fraction"],
            "end_ps": int(res.summary["run"]["end_ps"]), "completed": int(m["completed"].sum()),
            "messages": len(m), "status": res.summary["run"]["status"], "op_time_ps": ops}


def rel(a, b):
    if a is None or b is None or b == 0:
        return None
    return (a - b) / b


def run_case(topo, pat, policy, tmp, profile=False):
    out = {"topology": topo, "traffic": pat, "routing": policy}
    for engine in ("packet", "flow"):
        sc = scenario(topo, pat, policy, engine, tmp, profile=profile)
        t0 = time.perf_counter()
        res = fabricsim.run(sc)
        wall = time.perf_counter() - t0
        out[engine] = {**figures(res), "wall_s": round(wall, 3)}
    p, f = out["packet"], out["flow"]
    out["rel_diff"] = {k: rel(f[k], p[k]) for k in ("completion_time_ratio", "goodput_fraction", "end_ps")}
    op_diffs = [rel(f["op_time_ps"].get(k), v) for k, v in p["op_time_ps"].items()]
    op_diffs = [d for d in op_diffs if d is not None]
    out["rel_diff"]["op_time_max_abs"] = max((abs(d) for d in op_diffs), default=None)
    out["wall_ratio"] = round(p["wall_s"] / max(f["wall_s"], 1e-9), 1)
    return out


def fmt(x, pct=False):
    if x is None:
        return "NA"
    return f"{100 * x:+.1f}%" if pct else f"{x:.3f}"


def table(rows) -> str:
    lines = ["| topology | traffic | routing | CTR packet | CTR flow | diff | goodput packet | goodput flow | diff "
             "| max op diff | wall packet s | wall flow s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, f, d = r["packet"], r["flow"], r["rel_diff"]
        lines.append(f"| {r['topology']} | {r['traffic']} | {r['routing']} | {fmt(p['completion_time_ratio'])} "
                     f"| {fmt(f['completion_time_ratio'])} | {fmt(d['completion_time_ratio'], True)} "
                     f"| {fmt(p['goodput_fraction'])} | {fmt(f['goodput_fraction'])} "
                     f"| {fmt(d['goodput_fraction'], True)} | {fmt(d['op_time_max_abs'], True)} "
                     f"| {p['wall_s']:.2f} | {f['wall_s']:.3f} | {r['wall_ratio']:.1f}x |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="leaf-spine, permutation / incast / ring only")
    ap.add_argument("--only", default="", help="run cases whose 'topo-traffic-routing' contains this")
    ap.add_argument("--profile", action="store_true", help="packet adaptive cases with profile: spectrum_x")
    ap.add_argument("--output", default=str(OUT))
    a = ap.parse_args(argv)
    rows = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for topo, pat, policy in matrix(a.quick):
            name = f"{topo}-{pat}-{policy}"
            if a.only and a.only not in name:
                continue
            r = run_case(topo, pat, policy, tmp, profile=a.profile)
            rows.append(r)
            d_ = r["rel_diff"]
            print(f"{name}: ctr {fmt(d_['completion_time_ratio'], True)} goodput {fmt(d_['goodput_fraction'], True)} "
                  f"op {fmt(d_['op_time_max_abs'], True)} wall {r['packet']['wall_s']:.2f}s/"
                  f"{r['flow']['wall_s']:.3f}s", flush=True)
    doc = {"command": "PYTHONPATH=. python benchmarks/bench_flow_validation.py " + " ".join(argv or sys.argv[1:]),
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(),
                       "cpus": os.cpu_count(), "processor": platform.processor()},
           "packet_config": ("lossless (unbounded buffers), cc none, routing.policy as named"
                             + ("; adaptive: profile spectrum_x" if a.profile else "")),
           "wall_total_s": round(time.perf_counter() - t_all, 1), "cases": rows}
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(table(rows))
    return doc


if __name__ == "__main__":
    main()
