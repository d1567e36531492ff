#!/usr/bin/env python3
"""Old switch model = new model with the compatibility settings, on four shipped scenarios.

The switch changes of the ``switch`` branch alter defaults (CNP-only strict priority, dequeue-time
ECN/INT, PFC response delay, INT wire bytes). With ``strict_priority: control`` (lossless) or
``none`` (lossy), ``ecn.sample: enqueue``, ``pfc.response: 0ns`` and zero INT bytes the new code
must reproduce the old results exactly. Run once per tree and compare the printed fingerprints::

    PYTHONPATH=<old tree> python3 benchmarks/check_switch_compat.py old
    PYTHONPATH=. python3 benchmarks/check_switch_compat.py compat     # must equal "old"
    PYTHONPATH=. python3 benchmarks/check_switch_compat.py new        # the new defaults
"""
import hashlib
import json
import sys
from pathlib import Path

import fabricsim

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
which = sys.argv[1]   # old | compat | new
out = {}
for name in ("incast_dcqcn", "incast_lossy_none", "leaf_spine_32_raw", "incast_telemetry"):
    ov = []
    if which == "compat":
        lossless = name in ("incast_dcqcn", "incast_telemetry")
        ov = [f"switch.strict_priority={'control' if lossless else 'none'}", "switch.ecn.sample=enqueue",
              "switch.pfc.response=0ns", "switch.int_hop=0B", "switch.int_header=0B"]
    res = fabricsim.run(str(SCENARIOS / f"{name}.yaml"), overrides=ov)
    m = res.messages
    h = hashlib.sha1(m[["message_id", "fct_ps", "delivered_bytes", "retransmitted_bytes", "cnps", "ecn_marked_packets"]].to_csv().encode()).hexdigest()[:12]
    out[name] = dict(hash=h, last_us=round(float(m.fct_ps.max()) / 1e6, 2), marks=int(m.ecn_marked_packets.sum()), cnps=int(m.cnps.sum()),
                     drops=int(res.summary["drops"]["packets"]), pauses=int(res.summary["transport"]["pfc_pause_events"]))
print(json.dumps(out))
