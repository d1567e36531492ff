"""Traffic at cluster scale: trace reading (Parquet -> checked MessageTable), ``trace moe``
generation (DeepSeek-V3, EP 64, 1 layer) and ``validate`` of a 1 MiB all-to-all, at 512 / 2048 /
8192 GPUs, with baselines measured in the same run (np.arange of as many rows; the row-by-row
trace reader at the smallest size).

    PYTHONPATH=. python benchmarks/bench_traffic_scale.py [--gpus 512,2048,8192] [--tokens 4096]

Writes benchmarks/results/traffic_scale.json.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TOPO = {512: None, 2048: "gb300_2048_4x200g.yaml", 4096: "gb300_4096_4x200g.yaml", 8192: "gb300_8192_4x200g.yaml"}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="512,2048,8192")
    ap.add_argument("--tokens", type=int, default=4096, help="tokens per GPU of the MoE trace")
    ap.add_argument("-o", "--output", default=str(ROOT / "benchmarks/results/traffic_scale.json"))
    args = ap.parse_args(argv)
    from fabricsim.api import prepare
    from fabricsim.traces import write_trace
    from fabricsim.traces.io import _collect, read_trace, read_trace_table
    from fabricsim.traces.moe import generate_moe_trace, load_moe_config
    import pyarrow.parquet as pq

    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="bench_traffic_"))
    for i, n in enumerate(int(x) for x in args.gpus.split(",")):
        r = {"gpus": n}
        cfg = load_moe_config(dict(model="deepseek-v3", gpus=n, ep_size=64, tokens_per_gpu=args.tokens, layers=1))
        gen, r["moe_generate_s"] = timed(lambda: generate_moe_trace(cfg))
        path = tmp / f"moe_{n}.parquet"
        _, r["moe_write_s"] = timed(lambda: write_trace(gen.trace, path))
        r["messages"] = len(gen.trace)
        r["dep_edges"] = int(gen.trace.columns()[1][-1])
        tab, r["trace_read_table_s"] = timed(lambda: read_trace_table(path, num_hosts=n))
        _, r["baseline_arange_same_rows_s"] = timed(lambda: np.arange(len(tab), dtype=np.int64).sum())
        if i == 0:  # the row-by-row reader (the path replaced), at the smallest size
            def rowwise():
                t = pq.read_table(path)
                cols = {c: t.column(c).to_pylist() for c in t.column_names}
                return _collect(((j, {c: v[j] for c, v in cols.items()}) for j in range(t.num_rows)), str(path), "row")
            _, r["baseline_row_by_row_parse_s"] = timed(rowwise)
        del gen, tab
        topo = TOPO.get(n)
        if topo:
            sc = tmp / f"a2a_{n}.yaml"
            sc.write_text(f"name: a2a_{n}\ntopology:\n  kind: file\n  path: {ROOT / 'topologies' / topo}\n"
                          "traffic:\n  pattern: all_to_all\n  message_size: 1MiB\nsimulation:\n  seed: 1\n")
            (_, sim), r["validate_a2a_s"] = timed(lambda: prepare(str(sc)))
            r["a2a_messages"] = len(sim.messages)
            r["a2a_table_bytes"] = sim.messages.nbytes()
            _, r["baseline_arange_a2a_rows_s"] = timed(lambda: np.arange(len(sim.messages), dtype=np.int64).sum())
            del sim
        r["peak_rss_kb_so_far"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(json.dumps(r), flush=True)
        rows.append(r)
    out = {"command": " ".join([sys.executable, *sys.argv]), "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                       "python": platform.python_version(), "numpy": np.__version__},
           "moe": {"preset": "deepseek-v3", "ep_size": 64, "tokens_per_gpu": args.tokens, "layers": 1},
           "results": rows}
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
