"""Fluid max-min fair references: the rates and finish times an ideal fluid network would give.

These are the analytic yardsticks a packet run is checked against (docs/fidelity.md): a fabric
whose flows are pinned to paths (ECMP) cannot beat max-min fair sharing of those paths, and a
good transport with no losses should come close to it.

:func:`max_min_rates` is progressive filling (Bertsekas & Gallager, *Data Networks* 6.5.2): raise
every unfrozen flow's rate equally; when a link saturates, freeze the flows crossing it; repeat.

>>> max_min_rates([["L1"], ["L1", "L2"], ["L2"]], {"L1": 1.0, "L2": 3.0})
[0.5, 0.5, 2.5]
>>> max_min_rates([["L1", "L2"], ["L1"], ["L2"]], {"L1": 1.0, "L2": 1.0})   # parking lot
[0.5, 0.5, 0.5]

:func:`fluid_completion` runs the fluid model through time: flows share max-min rates, and each
time one finishes the others are re-shared.

>>> fluid_completion([1.0, 1.0], [["L"], ["L"]], {"L": 1.0})
[2.0, 2.0]
>>> fluid_completion([1.0, 3.0], [["L"], ["L"]], {"L": 1.0})
[2.0, 4.0]
"""
from __future__ import annotations

from typing import Hashable, Sequence


def max_min_rates(paths: Sequence[Sequence[Hashable]], capacity: dict) -> list[float]:
    """Max-min fair rate of each flow, given the links each crosses and the links' capacities.

    A flow that crosses no capacitated link is unconstrained (rate ``inf``)."""
    n = len(paths)
    rate = [0.0] * n
    frozen = [False] * n
    left = dict(capacity)
    users: dict = {}
    for i, p in enumerate(paths):
        for link in set(p):
            if link in capacity:
                users.setdefault(link, []).append(i)
    active = {link: len(fs) for link, fs in users.items()}
    while True:
        best = None
        for link, k in active.items():
            if k:
                share = left[link] / k
                if best is None or share < best[0]:
                    best = (share, link)
        if best is None:
            break
        inc = best[0]
        unfrozen = [i for i in range(n) if not frozen[i]]
        for i in unfrozen:
            rate[i] += inc
        for link in active:
            left[link] -= inc * active[link]
        # freeze every flow on a link that is now full (within rounding)
        for link, k in list(active.items()):
            if k and left[link] <= 1e-12 * max(1.0, capacity[link]):
                for i in users[link]:
                    if not frozen[i]:
                        frozen[i] = True
                        for other in set(paths[i]):
                            if other in active:
                                active[other] -= 1
    for i in range(n):
        if not frozen[i] and not any(link in capacity for link in paths[i]):
            rate[i] = float("inf")
    return rate


def fluid_completion(sizes: Sequence[float], paths: Sequence[Sequence[Hashable]], capacity: dict,
                     starts: Sequence[float] | None = None) -> list[float]:
    """Finish time of each flow when active flows share max-min fair rates at every instant.

    ``sizes`` and ``capacity`` in consistent units (e.g. bytes and bytes/ps: times come out in ps).
    ``starts`` (default 0) are the flows' start times."""
    n = len(sizes)
    starts = list(starts) if starts is not None else [0.0] * n
    left = [float(s) for s in sizes]
    end = [None] * n
    t = min(starts) if n else 0.0
    while any(e is None for e in end):
        live = [i for i in range(n) if end[i] is None and starts[i] <= t]
        future = [starts[i] for i in range(n) if end[i] is None and starts[i] > t]
        if not live:
            t = min(future)
            continue
        rates = max_min_rates([paths[i] for i in live], capacity)
        dt = min(left[i] / r if r > 0 else float("inf") for i, r in zip(live, rates))
        if future and min(future) - t < dt:
            dt = min(future) - t
        for i, r in zip(live, rates):
            left[i] -= r * dt
        t += dt
        for i in live:
            if left[i] <= 1e-9 * max(1.0, sizes[i]):
                end[i] = t
    return end


# --------------------------------------------------------------------------------------------
# the fluid reference of a run's own ECMP placement

def ecmp_placement(sim) -> list[tuple[object, int, list]]:
    """Where ECMP puts each queue pair of ``sim`` (a :class:`~fabricsim.engine.interface.SimulationInput`).

    Returns ``[(message, queue-pair bytes, [directed link (a, b, k), ...])]`` in the order the
    packet engine opens queue pairs (messages released together, in message order), with the same
    queue-pair numbering and 5-tuple hashes (:class:`~fabricsim.net.packet.ConnectionTable`, so
    messages on one connection, ``Message.conn >= 0``, share its queue pairs) and the same per-switch choice
    (:func:`~fabricsim.routing.ecmp.ecmp_index`) as a packet run of the same scenario and seed.
    ``k`` numbers the parallel links between ``a`` and ``b`` in the topology's link order.
    Single-port hosts only (leaf-spine fabrics); messages must start together and have no
    dependencies (the release order then is the message order).
    """
    from ..flows.identity import FLOWS_SALT_STREAM, ConnectionTable
    from ..routing.ecmp import SALT_STREAM, ecmp_index
    topo, paths = sim.topology, sim.paths
    parallel: dict = {}
    for u, v, _k, _d in topo.links():
        parallel[(u, v)] = parallel.get((u, v), 0) + 1
        parallel[(v, u)] = parallel.get((v, u), 0) + 1
    table = ConnectionTable(sim.streams.u64(FLOWS_SALT_STREAM))
    ecmp_salt = sim.streams.u64(SALT_STREAM)
    hosts = set(topo.hosts)
    out = []
    t0 = {m.start_ps for m in sim.messages}
    if len(t0) > 1 or any(m.deps for m in sim.messages):
        raise ValueError("the ECMP fluid reference needs messages that all start together, without dependencies")
    for m in sim.messages:
        for _uid, _sport, h, size in table.open(m.src, m.dst, m.size_bytes, m.qps, m.conn):
            first = list(paths.first_hops(m.src, m.dst))
            if len(first) != 1 or parallel[(m.src, first[0])] != 1:
                raise ValueError(f"the ECMP fluid reference supports single-port hosts (host {m.src} has several)")
            links = [(m.src, first[0], 0)]
            node = first[0]
            while node != m.dst:
                ports = [(node, nbr, k) for nbr in paths.next_hops(node, m.dst) for k in range(parallel[(node, nbr)])]
                link = ports[0] if len(ports) == 1 else ports[ecmp_index(h, ecmp_salt, node, len(ports))]
                links.append(link)
                node = link[1]
                if node in hosts and node != m.dst:
                    raise ValueError(f"path of message {m.id} reached host {node}")
            out.append((m, size, links))
    return out


def ecmp_fluid_reference(source, overrides=()) -> dict:
    """Fluid max-min completion of a scenario's messages pinned to the ECMP paths its own packet run
    takes (:func:`ecmp_placement`).

    Each queue pair is a fluid flow of its payload bytes; a link's capacity is its payload rate
    (``rate x mtu / (mtu + header)``); rates are max-min fair at every instant
    (:func:`fluid_completion`). A message ends when its last queue pair does, plus the pipeline
    latency of its idle path (its idle-fabric ideal minus its idle serialisation time), so an
    uncontended message gets exactly its ideal. Returns ``duration_ps``, ``ideal_duration_ps``
    and ``completion_time_ratio`` (ideal / duration, as in the run's summary).
    """
    from ..api import prepare
    from .ideal import IdealModel
    _loaded, sim = prepare(source, overrides)
    sc = sim.scenario
    mtu, header = sc.simulation.mtu, sc.simulation.header
    g = sim.topology.graph
    conns = [(m.conn, m.src, m.dst) for m in sim.messages if m.conn >= 0]
    if len(set(conns)) != len(conns):
        # the packet engine runs them one after another (a connection's FIFO), not side by side
        raise ValueError("the ECMP fluid reference needs at most one message per connection (conn, src, dst)")
    placed = ecmp_placement(sim)
    cap = {}
    for _m, _s, links in placed:
        for a, b, k in links:
            rate = [d["rate_bps"] for d in g.get_edge_data(a, b).values()][k]
            cap[(a, b, k)] = rate / 8e12 * mtu / (mtu + header)       # payload bytes per ps
    ends = fluid_completion([s for _m, s, _l in placed], [l for _m, _s, l in placed], cap)
    ideal = IdealModel(sim)
    msg_end: dict = {}
    for (m, _s, links), e in zip(placed, ends):
        alone = m.size_bytes / min(cap[link] for link in links)
        latency = ideal.fct(m) - alone
        msg_end[m.id] = max(msg_end.get(m.id, 0.0), e + latency)
    duration = max(msg_end.values())
    from .bound import LowerBound
    ideal_duration = LowerBound(ideal, sim.messages).of(min(m.start_ps for m in sim.messages)).duration_ps
    return {"duration_ps": duration, "ideal_duration_ps": ideal_duration,
            "completion_time_ratio": ideal_duration / duration, "flows": len(placed)}
