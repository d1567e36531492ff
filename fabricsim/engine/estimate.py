"""What a run will cost before it starts: packet-hops for the packet engine, and its wall time.

A packet-engine run costs about one event per packet per hop, data and control: an all-to-all
of 1 MiB on 8,192 GPUs is about 10^11 packet-hops, days of wall time. :func:`estimate` counts
them from the message sizes and the path lengths (the hop count of a sample of the run's
host pairs, on their shortest paths), and converts them to wall time at the packet engine's
measured speed on the scenario's ``simulation.kernel`` (:data:`HOPS_PER_S`); ``fabricsim run``
prints the estimate and, when it is long, suggests ``simulation.engine: flow`` (and, on a Python
kernel, ``simulation.kernel: compiled``).

>>> from fabricsim.api import prepare
>>> _l, sim = prepare({"topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 1},
...                    "traffic": {"pattern": "permutation", "message_size": "40KiB"}})
>>> e = estimate(sim)
>>> e["data_packets"], e["mean_hops"]          # 4 messages of 10 MTU packets; 2 or 4 hops
(40, 3.0)
"""
from __future__ import annotations

import numpy as np

from ..flows.table import MessageTable

#: packet-hops per second of the packet engine on each kernel, data and control, one core; machine-
#: dependent figures, so the other kernels are heap's times their speed-up measured beside heap in
#: one run. heap: the 128-host leaf-spine ECMP run of benchmarks/results/packet_speed.json (250,639
#: packet-hops/s). simpy: 1.16-1.61x slower than heap (results/packet_speed_workloads.json): 1.4x.
#: compiled: 7.1-19.6x heap on the 128-host permutation and all-to-all
#: (results/packet_speed_compiled_any_rate.json): the all-to-all's 7x, the larger agenda's. Only
#: where the scenario is in the compiled core's coverage: outside it the run falls back to heap,
#: which the estimate cannot know before the engine is built, so the warning says so
HOPS_PER_S = {"heap": 250_000, "simpy": 250_000 * 10 // 14, "compiled": 250_000 * 7}
#: the heap kernel's figure (the default kernel)
PACKET_HOPS_PER_S = HOPS_PER_S["heap"]
#: a run estimated to take longer than this (s) gets a warning suggesting the flow engine
LONG_RUN_S = 3600.0
#: host pairs whose path length is measured (the rest take their mean)
SAMPLE_PAIRS = 256


def estimate(sim) -> dict:
    """Packets, hops and wall time a packet-engine run of ``sim`` would take (see module doc).

    Returns ``messages``, ``data_packets`` (MTU packets, or cells with ``cell_packets > 1``),
    ``mean_hops`` (sampled), ``packet_hops`` (data plus one control packet per data packet back
    the same way, divided by ``receiver.ack_every``), ``kernel``, ``hops_per_s`` (its figure in
    :data:`HOPS_PER_S`) and ``wall_s``.
    """
    sc = sim.scenario
    t = sim.messages if isinstance(sim.messages, MessageTable) else MessageTable.from_messages(sim.messages)
    unit = sc.simulation.mtu * sc.simulation.cell_packets
    kernel = sc.simulation.kernel
    hops_per_s = HOPS_PER_S[kernel]
    n = len(t)
    if not n:
        return {"messages": 0, "data_packets": 0, "mean_hops": 0.0, "packet_hops": 0, "kernel": kernel,
                "hops_per_s": hops_per_s, "wall_s": 0.0}
    packets = int(np.sum(-(-t.size_bytes // unit)))
    step = max(1, n // SAMPLE_PAIRS)
    rows = range(0, n, step)
    hops = []
    for i in rows:
        try:
            hops.append(len(sim.paths.one_path(int(t.src[i]), int(t.dst[i]))) - 1)
        except ValueError:
            continue
    mean_hops = float(np.mean(hops)) if hops else 0.0
    ack_every = getattr(sc.receiver.params, "ack_every", 1) or 1
    packet_hops = int(packets * mean_hops * (1 + 1 / ack_every))
    return {"messages": n, "data_packets": packets, "mean_hops": mean_hops, "packet_hops": packet_hops,
            "kernel": kernel, "hops_per_s": hops_per_s, "wall_s": packet_hops / hops_per_s}


def long_run_warning(sim) -> str | None:
    """A one-line warning if a packet-engine run of ``sim`` is estimated to exceed
    :data:`LONG_RUN_S`, else None."""
    if sim.scenario.simulation.engine != "packet":
        return None
    e = estimate(sim)
    if e["wall_s"] <= LONG_RUN_S:
        return None
    if e["kernel"] == "compiled":
        also = (f" (if the compiled core covers this scenario; otherwise it runs on heap, "
                f"about {_human(e['packet_hops'] / HOPS_PER_S['heap'])})")
    else:
        also = (f"; `--set simulation.kernel=compiled` runs the same model faster where it covers the scenario "
                f"(about {_human(e['packet_hops'] / HOPS_PER_S['compiled'])}; docs/compiled-core.md)")
    return (f"this packet-level run is about {e['packet_hops']:.3g} packet-hops ({e['data_packets']:.3g} data packets x "
            f"{e['mean_hops']:.1f} hops, with ACKs): about {_human(e['wall_s'])} at {e['hops_per_s']:,} hops/s on "
            f"kernel {e['kernel']}{also}; `--set simulation.engine=flow` runs the flow-level model in seconds to "
            f"minutes (docs/fidelity.md, 'Flow engine')")


def _human(s: float) -> str:
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"
