"""``fabricsim trace moe`` generation speed: one DeepSeek-V3 MoE layer (EP 64, 4,096 tokens per GPU,
seed 1) at 512 / 2048 / 8192 GPUs, ``generate_moe_trace`` and the Parquet write timed in a fresh
subprocess per case (wall, CPU and peak RSS of that process), with bare numpy baselines measured in
the same run: as many float32 uniforms as the largest case routes (``Generator.random``, 8,192
tokens x 256 experts at a time), and as many raw PCG64 words (``random_raw``: the draws the trace is
made of, the floor of any generator that keeps the same trace for a seed).

    PYTHONPATH=. python3 benchmarks/bench_trace_moe.py [--gpus 512,2048,8192] [--baseline-src DIR]

``--baseline-src DIR`` also runs every case with the fabricsim of another checkout (e.g. the code
before a change) and checks that both write the same file (SHA-256). Writes
benchmarks/results/trace_moe.json (``-o`` to change).
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

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import hashlib, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from fabricsim.traces import write_trace
from fabricsim.traces.moe import MoeTraceConfig, generate_moe_trace
gpus, path, tokens = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cfg = MoeTraceConfig(model="deepseek-v3", gpus=gpus, ep_size=64, tokens_per_gpu=tokens, layers=1, seed=1)
w0, c0 = time.perf_counter(), time.process_time()
gen = generate_moe_trace(cfg)
w1, c1 = time.perf_counter(), time.process_time()
write_trace(gen.trace, path)
w2, c2 = time.perf_counter(), time.process_time()
h = hashlib.sha256(open(path, "rb").read()).hexdigest()
print(json.dumps({"generate_s": w1 - w0, "write_s": w2 - w1, "total_s": w2 - w0, "cpu_s": c2 - c0,
                  "messages": len(gen.trace), "sha256": h,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

BARE = r"""
import json, sys, time
import numpy as np
n_tokens, experts, chunk = int(sys.argv[1]), int(sys.argv[2]), 8192
rng = np.random.default_rng(1)
buf = np.empty((chunk, experts), dtype=np.float32)
t = time.perf_counter()
for a in range(0, n_tokens, chunk):
    rng.random((min(chunk, n_tokens - a), experts), dtype=np.float32, out=buf[:min(chunk, n_tokens - a)])
uniform = time.perf_counter() - t
t = time.perf_counter()
for a in range(0, n_tokens, chunk):
    rng.bit_generator.random_raw(min(chunk, n_tokens - a) * experts // 2)
raw = time.perf_counter() - t
print(json.dumps({"float32_uniforms_s": uniform, "pcg64_raw_words_s": raw, "values": n_tokens * experts}))
"""


def run(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="512,2048,8192")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per GPU (smaller: a smoke run)")
    ap.add_argument("--baseline-src", default=None, help="another checkout to time as well (e.g. the old code)")
    ap.add_argument("-o", "--output", default=str(ROOT / "benchmarks/results/trace_moe.json"))
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.gpus.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench_trace_moe_"))
    srcs = {"current": str(ROOT)}
    if args.baseline_src:
        srcs["baseline"] = str(Path(args.baseline_src).resolve())
    bare = run([BARE, str(max(sizes) * args.tokens), "256"])
    print(f"bare numpy, {bare['values']:,} values: float32 uniforms {bare['float32_uniforms_s']:.1f} s, "
          f"raw PCG64 words {bare['pcg64_raw_words_s']:.1f} s", flush=True)
    rows = []
    for n in sizes:
        for name, src in srcs.items():
            r = {"gpus": n, "code": name, **run([CHILD, src, str(n), str(tmp / f"{name}_{n}.parquet"), str(args.tokens)])}
            os.remove(tmp / f"{name}_{n}.parquet")
            rows.append(r)
            print(f"{n:5d} GPUs {name:8s}: generate {r['generate_s']:6.1f} s + write {r['write_s']:4.1f} s "
                  f"(CPU {r['cpu_s']:6.1f} s), peak RSS {r['peak_rss_mib']:6.0f} MiB, {r['messages']:,} messages",
                  flush=True)
        if len(srcs) > 1:
            same = len({r["sha256"] for r in rows if r["gpus"] == n}) == 1
            print(f"{n:5d} GPUs: files {'identical' if same else 'DIFFER'}", flush=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": "PYTHONPATH=. python3 benchmarks/bench_trace_moe.py " + " ".join(argv or sys.argv[1:]),
              "machine": {"python": platform.python_version(), "processor": platform.processor(),
                          "cpus": os.cpu_count(), "load_avg_at_start": os.getloadavg()},
              "case": f"deepseek-v3, ep_size 64, tokens_per_gpu {args.tokens}, layers 1, seed 1",
              "bare_baseline": bare, "rows": rows}
    if len(srcs) > 1:
        result["identical_files"] = {n: len({r["sha256"] for r in rows if r["gpus"] == n}) == 1 for n in sizes}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
