#!/usr/bin/env python3
"""Runner for the instruction counts in results/switch_instructions.json (valgrind, deterministic).

    PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no python3 benchmarks/switch_ir_runner.py perm 0   # set-up only
    PYTHONPATH=<tree> valgrind --tool=cachegrind --cache-sim=no python3 benchmarks/switch_ir_runner.py perm 1   # set-up + run

The run costs the difference of the two "I refs"; optional third argument: ecn.sample (enqueue).
"""
import sys, fabricsim
from fabricsim.api import prepare
which, do_run = sys.argv[1], sys.argv[2] == "1"
extra = {"switch": {"ecn": {"sample": sys.argv[3]}}} if len(sys.argv) > 3 else {}
topo = {"kind": "leaf_spine", "hosts_per_leaf": 8, "leaves": 4, "spines": 8}
if which == "perm":
    sc = {"name": "p", "topology": topo, "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "1MiB"},
          "routing": {"policy": "ecmp"}, "receiver": {"model": "ddp"}, "simulation": {"seed": 1}}
else:  # congested: 16 -> 1 incast, dcqcn, lossy 2 MiB per port
    sc = {"name": "i", "topology": topo, "traffic": {"pattern": "incast", "senders": 16, "receiver": 0, "message_size": "512KiB"},
          "routing": {"policy": "ecmp"}, "receiver": {"model": "ddp", "rto_low": "1ms", "rto_high": "1ms"},
          "congestion_control": {"algorithm": "dcqcn"}, "simulation": {"seed": 1}}
sc.update(extra)
if do_run:
    res = fabricsim.run(sc)
    print("SUMMARY", {k: v for k, v in res.summary.items() if k in ("run", "engine")})
else:
    prepare(sc)
