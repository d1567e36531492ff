"""What a run will cost before it starts: packet-hops for the packet engine, and its wall time.

A packet-engine run costs about one event per packet per hop, data and control: an all-to-all
of 1 MiB on 8,192 GPUs is about 10^11 packet-hops, days of wall time. :func:`estimate` counts
them from the message sizes and the path lengths (the hop count of a sample of the run's
host pairs, on their shortest paths), and converts them to wall time with the packet engine's
measured cost model on the scenario's ``simulation.kernel`` (:data:`SPEED`): packet-hops at a
rate that falls with the fabric's size, plus a fixed cost per message (its lifecycle in
Python). ``fabricsim run`` prints the estimate and, when it is long, suggests
``simulation.engine: flow`` (and, on a Python kernel, ``simulation.kernel: compiled``).

>>> from fabricsim.api import prepare
>>> _l, sim = prepare({"topology": {"hosts_per_leaf": 2, "leaves": 2, "spines": 1},
...                    "traffic": {"pattern": "permutation", "message_size": "40KiB"}})
>>> e = estimate(sim)
>>> e["data_packets"], e["mean_hops"]          # 4 messages of 10 MTU packets; 2 or 4 hops
(40, 3.0)
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..flows.table import MessageTable

class Speed(NamedTuple):
    """The packet engine's measured cost on one kernel: ``wall_s = packet_hops / hops_per_s(hosts)
    + messages x per_message_s``, with ``hops_per_s(hosts) = hops_per_s_128 x (hosts / 128) ** -decay``.

    The hop rate falls with the fabric's size (a larger agenda and state: more cache misses per
    event); each message adds its release, completion and rows, in Python on every kernel."""
    hops_per_s_128: float
    decay: float
    per_message_s: float

    def hops_per_s(self, hosts: int) -> float:
        """Packet-hops per second on a fabric of ``hosts`` hosts."""
        return self.hops_per_s_128 * (max(hosts, 1) / 128) ** -self.decay


#: the cost model per kernel, one core, fitted (least squares on the log of the wall time) to the
#: measured scaling curves: heap to benchmarks/results/packet_scale.json (128-1,024 hosts,
#: permutation and all-to-all, 7 runs: each within 0.80-1.17x of its measured engine time), compiled
#: to results/packet_scale_compiled_slice6_2026-12-07.json (8 runs, 0.87-1.21x; the core records
#: most completions itself since slice 6: 47 us per message, was 273); simpy runs 1.16-1.61x slower than
#: heap (results/packet_speed_workloads.json): heap's figures / 1.4. Machine-dependent figures:
#: the machine that measured them varied 1.3-2.2x from day to day. The compiled figures hold only
#: where the scenario is in the compiled core's coverage: outside it the run falls back to heap,
#: which the estimate cannot know before the engine is built, so the warning says so
SPEED = {"heap": Speed(126_000, 0.384, 516e-6),
         "simpy": Speed(126_000 / 1.4, 0.384, 516e-6 * 1.4),
         "compiled": Speed(6_959_000, 0.581, 46.6e-6)}
#: a run estimated to take longer than this (s) gets a warning suggesting the flow engine
LONG_RUN_S = 3600.0
#: host pairs whose path length is measured (the rest take their mean)
SAMPLE_PAIRS = 256


def estimate(sim) -> dict:
    """Packets, hops and wall time a packet-engine run of ``sim`` would take (see module doc).

    Returns ``messages``, ``hosts``, ``data_packets`` (MTU packets, or cells with
    ``cell_packets > 1``), ``mean_hops`` (sampled), ``packet_hops`` (data plus one control packet
    per data packet back the same way, divided by ``receiver.ack_every``), ``kernel``,
    ``hops_per_s`` (the kernel's hop rate at this fabric size, :data:`SPEED`) and ``wall_s``
    (:func:`wall_s`).
    """
    sc = sim.scenario
    t = sim.messages if isinstance(sim.messages, MessageTable) else MessageTable.from_messages(sim.messages)
    unit = sc.simulation.mtu * sc.simulation.cell_packets
    kernel = sc.simulation.kernel
    hosts = len(sim.topology.hosts)
    hops_per_s = int(SPEED[kernel].hops_per_s(hosts))
    n = len(t)
    if not n:
        return {"messages": 0, "hosts": hosts, "data_packets": 0, "mean_hops": 0.0, "packet_hops": 0,
                "kernel": kernel, "hops_per_s": hops_per_s, "wall_s": 0.0}
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
    return {"messages": n, "hosts": hosts, "data_packets": packets, "mean_hops": mean_hops,
            "packet_hops": packet_hops, "kernel": kernel, "hops_per_s": hops_per_s,
            "wall_s": wall_s(kernel, packet_hops, n, hosts)}


def wall_s(kernel: str, packet_hops: int, messages: int, hosts: int) -> float:
    """The packet engine's wall time (s) on ``kernel`` for ``packet_hops`` and ``messages`` on a
    fabric of ``hosts`` hosts (:class:`Speed`).

    >>> round(wall_s("heap", 2_000_000, 128, 128), 1)           # a 128-host permutation
    15.9
    >>> wall_s("compiled", 2_000_000, 128, 128) < wall_s("heap", 2_000_000, 128, 128)
    True
    """
    sp = SPEED[kernel]
    return packet_hops / sp.hops_per_s(hosts) + messages * sp.per_message_s


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
                f"about {_human(wall_s('heap', e['packet_hops'], e['messages'], e['hosts']))})")
    else:
        also = (f"; `--set simulation.kernel=compiled` runs the same model faster where it covers the scenario "
                f"(about {_human(wall_s('compiled', e['packet_hops'], e['messages'], e['hosts']))}; "
                f"docs/compiled-core.md)")
    return (f"this packet-level run is about {e['packet_hops']:.3g} packet-hops ({e['data_packets']:.3g} data packets x "
            f"{e['mean_hops']:.1f} hops, with ACKs, and {e['messages']:,} messages): about {_human(e['wall_s'])} at "
            f"{e['hops_per_s']:,} hops/s on kernel {e['kernel']} for {e['hosts']:,} hosts{also}; "
            f"`--set simulation.engine=flow` runs the flow-level model in seconds to minutes (docs/fidelity.md, "
            f"'Flow engine')")


def _human(s: float) -> str:
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"
