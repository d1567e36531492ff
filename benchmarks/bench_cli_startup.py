"""How long the command line takes to answer before doing any work.

    python3 benchmarks/bench_cli_startup.py [--repeat 15]

Each command runs in a fresh interpreter ``--repeat`` times (median and min reported), beside a
bare baseline measured in the same run: ``python3 -c pass``, the interpreter's own start-up.
The issue's target: ``fabricsim --help`` well under 0.5 s. For reference the table also times
importing the whole simulator (``import fabricsim.api``: numpy, pandas, scipy, networkx,
pydantic), which a real run pays and ``--help`` must not. Writes
benchmarks/results/cli_startup.json.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


def _cases():
    cases = {"bare: python3 -c pass": [PY, "-c", "pass"],
             "python3 -m fabricsim --help": [PY, "-m", "fabricsim", "--help"],
             "python3 -m fabricsim -h": [PY, "-m", "fabricsim", "-h"],
             "python3 -m fabricsim run --help": [PY, "-m", "fabricsim", "run", "--help"],
             "import fabricsim.api (a run's imports)": [PY, "-c", "import fabricsim.api"]}
    exe = shutil.which("fabricsim")
    if exe:
        cases["fabricsim --help (console script)"] = [exe, "--help"]
    return cases


def _time(cmd, repeat):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        out.append(time.perf_counter() - t0)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "cli_startup.json"))
    args = ap.parse_args(argv)
    rows = []
    for name, cmd in _cases().items():
        _time(cmd, 1)                                   # warm the file cache
        t = _time(cmd, args.repeat)
        rows.append({"command": name, "median_s": round(statistics.median(t), 4), "min_s": round(min(t), 4)})
    bare = rows[0]["median_s"]
    for r in rows:
        r["x_bare"] = round(r["median_s"] / bare, 2)
    w = max(len(r["command"]) for r in rows)
    print(f"{'command':<{w}}  median s   min s   x bare")
    for r in rows:
        print(f"{r['command']:<{w}}  {r['median_s']:8.3f}  {r['min_s']:6.3f}  {r['x_bare']:7.2f}")
    doc = {"date": date.today().isoformat(), "python": platform.python_version(), "machine": platform.machine(),
           "repeat": args.repeat, "rows": rows, "command": "python3 benchmarks/bench_cli_startup.py"}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
