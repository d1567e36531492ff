"""Cross-validation of the flow (fluid) engine against the packet engine: the whole matrix.

Runs every case of ``benchmarks/flow_validation_cases.py`` (permutation, all-to-all, incast,
DeepSeek-V3 MoE dispatch + combine, ring all-reduce; a 32-host leaf-spine and two NVL72 racks;
ecmp, spray, adaptive: the scenarios, the packet and flow configurations and each case's expected
agreement are declared there) on both engines, and compares

- ``effective_bandwidth.completion_time_ratio`` and ``goodput_fraction`` (summary), and
- per-operation completion times (``Result.collectives.time_ps``, traces with ops),

with the wall time of each engine and the packet kernel that ran. Writes
``benchmarks/results/flow_validation.json``, prints the markdown table of docs/fidelity/flow.md
and checks every case against its declared expectation: it exits 1 if one does not hold (this is
the runner of the ``slow`` cases of tests/test_flow_validation.py; ``pytest -m slow
tests/test_flow_validation.py`` runs the same checks as tests). ``--profile`` runs the adaptive
cases' packet side with ``profile: spectrum_x`` instead (telemetry CC, PFC, graded adaptive
routing): not the table's configuration, so no expectation is checked then.

    PYTHONPATH=. python benchmarks/bench_flow_validation.py [--quick] [--only SUBSTRING]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "flow_validation.json"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flow_validation_cases import CASES, case, run_case  # noqa: E402  (the one list of cases)


def fmt(x, pct=False):
    if x is None:
        return "NA"
    return f"{100 * x:+.1f}%" if pct else f"{x:.3f}"


def table(rows) -> str:
    lines = ["| topology | traffic | routing | CTR packet | CTR flow | diff | goodput packet | goodput flow | diff "
             "| max op diff | packet kernel | wall packet s | wall flow s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, f, d = r["packet"], r["flow"], r["rel_diff"]
        lines.append(f"| {r['topology']} | {r['traffic']} | {r['routing']} | {fmt(p['completion_time_ratio'])} "
                     f"| {fmt(f['completion_time_ratio'])} | {fmt(d['completion_time_ratio'], True)} "
                     f"| {fmt(p['goodput_fraction'])} | {fmt(f['goodput_fraction'])} "
                     f"| {fmt(d['goodput_fraction'], True)} | {fmt(d['op_time_max_abs'], True)} "
                     f"| {p['kernel']} | {p['wall_s']:.2f} | {f['wall_s']:.3f} | {r['wall_ratio']:.1f}x |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the fast cases only (those of the default test run)")
    ap.add_argument("--slow", action="store_true", help="the slow cases only (those the default test run leaves out)")
    ap.add_argument("--only", default="", help="run cases whose 'topo-traffic-routing' contains this")
    ap.add_argument("--kernel", default="compiled", choices=("compiled", "heap"),
                    help="packet kernel (default compiled, which runs on heap where it does not cover a case)")
    ap.add_argument("--profile", action="store_true", help="packet adaptive cases with profile: spectrum_x")
    ap.add_argument("--output", default=str(OUT))
    a = ap.parse_args(argv)
    rows = []
    t_all = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # untimed: load numba's caches (compiled packet core, flow solver: each routing's mode)
        # so that no case's wall time includes them
        for name in ("ls32-incast-ecmp", "ls32-incast-spray", "ls32-incast-adaptive", "nvl72x2-incast-spray"):
            run_case(case(name), tmp, kernel=a.kernel)
        for c in CASES:
            if (a.quick and not c.fast) or (a.slow and c.fast) or (a.only and a.only not in c.name):
                continue
            r = run_case(c, tmp, profile=a.profile, kernel=a.kernel)
            rows.append(r)
            d_ = r["rel_diff"]
            print(f"{c.name}: ctr {fmt(d_['completion_time_ratio'], True)} goodput {fmt(d_['goodput_fraction'], True)} "
                  f"op {fmt(d_['op_time_max_abs'], True)} wall {r['packet']['wall_s']:.2f}s "
                  f"({r['packet']['kernel']})/{r['flow']['wall_s']:.3f}s"
                  + ("" if a.profile or not r["failures"] else "  NOT AS DECLARED: " + "; ".join(r["failures"])),
                  flush=True)
    doc = {"command": "PYTHONPATH=. python benchmarks/bench_flow_validation.py " + " ".join(argv or sys.argv[1:]),
           "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "python": platform.python_version(),
                       "cpus": os.cpu_count(), "processor": platform.processor()},
           "packet_config": (f"lossless (unbounded buffers), cc none, routing.policy as named, kernel {a.kernel}"
                             + ("; adaptive: profile spectrum_x" if a.profile else "")),
           "wall_total_s": round(time.perf_counter() - t_all, 1), "cases": rows}
    Path(a.output).parent.mkdir(parents=True, exist_ok=True)
    Path(a.output).write_text(json.dumps(doc, indent=1) + "\n")
    print()
    print(table(rows))
    bad = [r for r in rows if r["failures"]]
    if not a.profile:
        print(f"\n{len(rows) - len(bad)} of {len(rows)} cases as declared in benchmarks/flow_validation_cases.py"
              + "".join(f"\n  {r['topology']}-{r['traffic']}-{r['routing']}: {'; '.join(r['failures'])}" for r in bad))
    doc["ok"] = a.profile or not bad
    return doc


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
