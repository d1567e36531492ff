#!/usr/bin/env python3
"""The compiled packet core on cluster topologies: multi-plane NICs and NVLink domains (issue 15).

Each case is a ``kind: cluster`` scenario run by the packet engine on ``kernel: heap`` and
``kernel: compiled`` (``--kernels``), each in a fresh interpreter, so that peak memory is the
case's own. For each run: ``wall_s`` (the child's ``fabricsim.run``, scenario to tables),
``engine_s`` (``summary.run.wall_time_s``: the event loop), events, status, messages completed,
``peak_rss_mb`` and a fingerprint of the messages and links tables; when both kernels ran, the
fingerprints (and event counts) must be equal, and the compiled run must have run compiled
(``summary.run.kernel.ran``), else the script fails. The compiled core is loaded (compiled once
if needed) by a small warm-up run before the first case, so ``wall_s`` includes loading the
numba cache (about 1-3 s), not compiling it.

Cases (``--cases``; the defaults are the first three):

``planes_32_a2a``
    32 GPUs (``domain: none``, 4 nodes of 8) with 4 x 200G NIC ports, one per plane,
    ``plane_split: per_packet``: all-to-all of 64 KiB per ordered pair, adaptive routing.
``nvl72x2_moe``
    128 GPUs in two NVL72 racks (72 + 56; NVLink with credit flow control inside a rack, 18
    chips), 4 x 200G NIC ports per GPU: one forward MoE layer of DeepSeek-V3's shape (top-8 of
    256 experts, node-limited to 4 racks, 32 tokens per GPU, flat dispatch then combine, with
    the experts' compute between; ``fabricsim trace moe --gpus 128 --ep-size 128
    --gpus-per-node 72 --tokens-per-gpu 32 --connections per_message``, generated into a
    temporary folder), adaptive routing.
``nvl72x2_a2a``
    the same 128 GPUs: all-to-all of 16 KiB per ordered pair (16,256 messages), adaptive routing.
``nvl72x2_moe_pxn``
    ``nvl72x2_moe`` with PXN (``nic.pxn``, 64 KiB pieces): a message to the other rack whose
    destination is on another rail moves over NVLink to the sender's peer on that rail first.
``su576_a2a``
    ``topologies/su_576.yaml`` (576 GPUs, 8 NVL72 racks, 4 x 200G planes): all-to-all of
    ``--su-size`` (default 4 KiB, one NVLink unit or one MTU packet) per ordered pair, 331,200
    messages, adaptive routing; compiled only unless ``--kernels`` says otherwise.

``--max-wall`` (900 s): a run still going after that long is killed and recorded as such, with
the time it had used; no figure is made up for it. ::

    python3 benchmarks/bench_cluster_compiled.py                     # the first three cases, both kernels
    python3 benchmarks/bench_cluster_compiled.py --cases su576_a2a --kernels compiled

Writes ``benchmarks/results/cluster_compiled.json`` (``--out``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = HERE / "results" / "cluster_compiled.json"
KERNELS = ("heap", "compiled")


def _racks128():
    return {"kind": "cluster", "domain": "nvl72", "gpus": 128, "nic": {"ports": 4, "rate": "200Gbps"}}


def scenario(case: str, tmp: str, su_size: str = "4KiB") -> dict:
    """The scenario of ``case`` (a trace it needs is written into ``tmp``)."""
    base = {"routing": {"policy": "adaptive"}, "simulation": {"seed": 1, "time_limit": "100ms"},
            "outputs": {"link_sample_interval": "off"}}
    if case == "planes_32_a2a":
        return {"name": case, "topology": {"kind": "cluster", "domain": "none", "nodes": 4,
                                           "nic": {"ports": 4, "rate": "200Gbps"}},
                "traffic": {"pattern": "all_to_all", "message_size": "64KiB"}, **base}
    if case in ("nvl72x2_moe", "nvl72x2_moe_pxn"):
        trace = Path(tmp) / "moe_dsv3_128.parquet"
        if not trace.exists():
            subprocess.run([sys.executable, "-m", "fabricsim", "trace", "moe", "-o", str(trace), "--preset",
                            "deepseek-v3", "--gpus", "128", "--ep-size", "128", "--gpus-per-node", "72",
                            "--tokens-per-gpu", "32", "--layers", "1", "--connections", "per_message", "--seed", "1"],
                           check=True, capture_output=True, env=_env())
        sc = {"name": case, "topology": _racks128(), "traffic": {"pattern": "trace", "path": str(trace)}, **base}
        if case == "nvl72x2_moe_pxn":
            sc["nic"] = {"plane_split": "per_packet", "pxn": True, "pxn_chunk": "64KiB"}
        return sc
    if case == "nvl72x2_a2a":
        return {"name": case, "topology": _racks128(), "traffic": {"pattern": "all_to_all", "message_size": "16KiB"},
                **base}
    if case == "su576_a2a":
        return {"name": case, "topology": {"preset": "su_576"},
                "traffic": {"pattern": "all_to_all", "message_size": su_size}, **base}
    raise SystemExit(f"unknown case {case!r}")


CASES = ("planes_32_a2a", "nvl72x2_moe", "nvl72x2_a2a", "su576_a2a", "nvl72x2_moe_pxn")

_CHILD = r"""
import hashlib, json, resource, sys, time
t0 = time.perf_counter()
import fabricsim
sc = json.loads(sys.argv[1])
res = fabricsim.run(sc)
wall = time.perf_counter() - t0
h = hashlib.sha256()
for t in (res.messages, res.links):
    h.update(t.to_csv(index=False).encode())
run = res.summary["run"]
print(json.dumps({"wall_s": wall, "engine_s": run["wall_time_s"], "events": run["events"],
                  "status": res.summary["status"], "ran": run["kernel"]["ran"],
                  "fallback": run["kernel"].get("fallback", ""),
                  "messages": int(len(res.messages)), "completed": int(res.messages["completed"].sum()),
                  "duration_ps": res.summary["pattern"].get("duration_ps"),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "tables_sha256": h.hexdigest()}))
"""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_one(sc: dict, kernel: str, max_wall: float) -> dict:
    sc = {**sc, "simulation": {**sc["simulation"], "kernel": kernel}}
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(sc)], capture_output=True, text=True,
                           timeout=max_wall, env=_env())
    except subprocess.TimeoutExpired:
        return {"kernel": kernel, "status": "over --max-wall", "wall_s": time.perf_counter() - t0}
    if p.returncode:
        raise SystemExit(f"{sc['name']} on {kernel} failed:\n{p.stderr[-3000:]}")
    return {"kernel": kernel, **json.loads(p.stdout.strip().splitlines()[-1])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES[:3]), choices=CASES)
    ap.add_argument("--kernels", nargs="+", default=None, choices=KERNELS,
                    help="default: both, except su576_a2a (compiled only)")
    ap.add_argument("--su-size", default="4KiB", help="su576_a2a: bytes per ordered pair")
    ap.add_argument("--max-wall", type=float, default=900.0)
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    args = ap.parse_args(argv)
    out = {"command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:])),
           "date": time.strftime("%Y-%m-%d %H:%M"), "machine": {
               "python": platform.python_version(), "cpu_count": os.cpu_count(),
               "loadavg_at_start": list(os.getloadavg())}, "cases": []}
    # warm-up: load (or compile) the compiled core once, outside the timed runs
    run_one({"name": "warm", "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 2,
                                          "nic": {"ports": 2, "rate": "400Gbps"}},
             "traffic": {"pattern": "all_to_all", "message_size": "8KiB"}, "simulation": {"seed": 1}},
            "compiled", 3600)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            sc = scenario(case, tmp, args.su_size)
            kernels = args.kernels or (["compiled"] if case == "su576_a2a" else list(KERNELS))
            row = {"case": case, "scenario": sc, "runs": []}
            for k in kernels:
                r = run_one(sc, k, args.max_wall)
                row["runs"].append(r)
                print(f"{case:14s} {k:8s} " + (f"engine {r['engine_s']:8.2f} s  wall {r['wall_s']:8.2f} s  events "
                                                 f"{r['events']:>11,}  {r['status']}  {r['completed']}/{r['messages']}  "
                                                 f"peak {r['peak_rss_mb']:.0f} MB" + (f"  FALLBACK {r['fallback']}"
                                                                                    if r["ran"] != k else "")
                                                 if "engine_s" in r else f"{r['status']} after {r['wall_s']:.0f} s"),
                      flush=True)
            done = {r["kernel"]: r for r in row["runs"] if "engine_s" in r}
            if "compiled" in done and done["compiled"]["ran"] != "compiled":
                bad += 1
            if len(done) == 2:
                h, c = done["heap"], done["compiled"]
                row["identical"] = h["tables_sha256"] == c["tables_sha256"] and h["events"] == c["events"]
                row["engine_speedup"] = h["engine_s"] / c["engine_s"]
                row["wall_speedup"] = h["wall_s"] / c["wall_s"]
                bad += not row["identical"]
                print(f"{case:14s} identical tables and events: {row['identical']}; engine {row['engine_speedup']:.1f}x, "
                      f"wall {row['wall_speedup']:.1f}x", flush=True)
            out["cases"].append(row)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
