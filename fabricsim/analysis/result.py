"""The :class:`Result` of a run: pandas tables plus a summary dict (definitions in docs/metrics.md)."""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimulationError
from ..flows.table import MessageTable
from .bound import LowerBound
from .collectives import add_tag_columns, collectives_summary, collectives_table
from .ideal import IdealModel
from .recorder import hist_percentile

PS_PER_S = 10**12
#: environment variable: "1" makes a run that beats its lower bound an error (the test suite sets it)
CHECK_BOUND_ENV = "FABRICSIM_CHECK_BOUND"
#: a completed message slower than this many times its ideal FCT counts in ``slowdown.messages_over_4x``
VICTIM_SLOWDOWN = 4.0


@dataclass
class Result:
    """Everything a run produced.

    Attributes
    ----------
    summary: dict
        Headline figures (see docs/metrics.md), including ``seed`` and ``run`` metadata.
    messages: DataFrame
        One row per message (completed or not).
    links: DataFrame
        One row per directed link (egress port).
    latency: DataFrame
        Packet-latency histogram buckets.
    goodput: DataFrame
        Delivered payload per time bin.
    collectives: DataFrame
        One row per traced operation (empty unless messages carry an ``op`` tag).
    link_timeseries: DataFrame
        Per link and sampling interval: bytes sent, utilisation, queue at the interval's end.
    nics: DataFrame
        One row per host (its SuperNIC): receive-side reorder statistics and send-side
        retransmissions (see docs/metrics.md).
    scenario: dict
        The resolved scenario (every default filled in).
    output_dir: Path | None
        Where the results folder was written, if anywhere.
    """

    summary: dict
    messages: pd.DataFrame
    links: pd.DataFrame
    latency: pd.DataFrame
    goodput: pd.DataFrame
    scenario: dict
    collectives: pd.DataFrame = field(default_factory=pd.DataFrame)
    link_timeseries: pd.DataFrame = field(default_factory=pd.DataFrame)
    nics: pd.DataFrame = field(default_factory=pd.DataFrame)
    output_dir: Path | None = None
    extra: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        s = self.summary
        eb = s["effective_bandwidth"]
        def f(x):
            return "n/a" if x is None else f"{x:.3f}"
        return (f"<Result {s['scenario']} seed={s['seed']} status={s['run']['status']} "
                f"messages={s['messages']['completed']}/{s['messages']['total']} "
                f"goodput_fraction={f(eb['goodput_fraction'])} completion_ratio={f(eb['completion_time_ratio'])} "
                f"slowdown_p99={f(s['slowdown']['p99'])} over_4x={s['slowdown']['messages_over_4x']}>")

    def headline(self) -> dict:
        """A flat dict of the main figures, convenient for comparing runs in a DataFrame.

        The completion-time ratio of a whole pattern can be 1.000 while one victim flow is many
        times slower than it should be, so the tail of the per-message slowdown
        (``slowdown_p99``) and the number of completed messages more than 4x slower than on an
        idle fabric (``messages_over_4x``) sit beside it, with the completion counts and the
        run's ``status`` (anything but ``complete``: the figures cover part of the pattern,
        :mod:`fabricsim.analysis.status`)."""
        s = self.summary
        return {
            "scenario": s["scenario"], "routing": s["routing"], "seed": s["seed"], "status": s["run"]["status"],
            "goodput_fraction": s["effective_bandwidth"]["goodput_fraction"],
            "completion_time_ratio": s["effective_bandwidth"]["completion_time_ratio"],
            "messages_completed": s["messages"]["completed"], "messages_total": s["messages"]["total"],
            "slowdown_p99": s["slowdown"]["p99"],
            "messages_over_4x": s["slowdown"]["messages_over_4x"],
            "fct_p50_us": s["fct"]["p50_ps"] / 1e6 if s["fct"]["p50_ps"] is not None else None,
            "fct_p99_us": s["fct"]["p99_ps"] / 1e6 if s["fct"]["p99_ps"] is not None else None,
            "latency_p99_us": s["packet_latency"]["p99_ps"] / 1e6 if s["packet_latency"]["count"] else None,
            "drops": s["drops"]["packets"],
            "retransmitted_bytes": s.get("transport", {}).get("retransmitted_bytes"),
            "peak_queue_bytes": s["links"]["max_peak_queue_bytes"],
        }


def _ideal_model(sim) -> IdealModel:
    """The run's :class:`IdealModel`: the one the input caches (:meth:`SimulationInput.ideal_model`)
    if it has one, so the engine's and the results' share their memos."""
    get = getattr(sim, "ideal_model", None)
    return get() if callable(get) else IdealModel(sim)


def _all_active(table, model, recorder, all_done: bool, sender_capacity: int):
    """``goodput_while_all_active_fraction`` and why it is null (docs/metrics.md).

    The window runs from the moment the last message's first payload arrived to the first
    message completion. It is only meaningful if every flow had time to carry data at its rate
    in it: a window shorter than the longest idle base RTT of the pattern's flows (one MTU packet
    and its ACK, :meth:`IdealModel.base_rtt`) measures the bursts of packets already in flight
    when it opened, not a rate (on a 72-GPU NVLink all-to-all it gave 0.014 with 8 KiB messages
    and 0.96 with 16 KiB).

    Returns ``(fraction or None, reason or None, window_ps or None, min_window_ps or None)``.
    """
    first_end, last_first = recorder.first_end, recorder.last_first_arrival
    if not all_done:
        return None, "not every message completed", None, None
    if not sender_capacity:
        return None, "no sender capacity", None, None
    if first_end is None or last_first is None or recorder.last_release is None:
        return None, "no message delivered payload", None, None
    min_window = model.min_window(table.src, table.dst)
    if recorder.last_release >= first_end:
        return None, "a message was released after the first completion: the flows never all ran at once", \
            None, min_window
    window = first_end - last_first
    if window <= 0:
        return None, "the first message completed before the last message's first payload arrived", \
            window, min_window
    if window < min_window:
        return None, (f"window {window} ps is shorter than the longest idle base RTT of the pattern's flows "
                      f"({min_window} ps)"), window, min_window
    b = recorder.delivered_at_first_end - recorder.delivered_at_last_first_arrival
    return b * 8 * PS_PER_S / window / sender_capacity, None, window, min_window


def na_ints(n: int) -> pd.arrays.IntegerArray:
    """An ``Int64`` column of ``n`` NA values (a figure an engine does not produce)."""
    return pd.arrays.IntegerArray(np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool))


def _node_names(g) -> np.ndarray:
    """Node id -> name (object array; None for ids no node has)."""
    names = np.full(max(g.nodes, default=-1) + 1, None, dtype=object)
    for n, d in g.nodes(data="name"):
        names[n] = d
    return names


def _link_table(sim):
    """The run's :class:`~fabricsim.flows.links.LinkTable` (the one the input caches, if it does)."""
    get = getattr(sim, "link_table", None)
    if callable(get):
        return get()
    from ..flows.links import LinkTable
    return LinkTable(sim.topology)


def _sender_ports(model, links, g, host, cls) -> tuple[int, int, np.ndarray]:
    """The capacity senders can use: each sending host's ports towards its destinations (the
    union over its messages of their pair class's first hops; ``host[i]`` sends message ``i``,
    of pair class ``cls[i]``). Returns ``(sender capacity bit/s, its scale-out NIC part,
    the pair classes whose payload leaves by a NIC port)``; a port to a switch is NVLink
    (scale-up) when the switch is in an NVLink domain or a link to it is of kind ``nvlink``."""
    if not len(host):
        return 0, 0, np.zeros(0, dtype=np.int64)
    ncls = int(cls.max()) + 1
    hc = np.unique(host * ncls + cls)                       # (host, class) pairs used
    h_of, c_of = np.divmod(hc, ncls)
    classes = np.unique(c_of)
    first = {c: sorted(model.ports(*model.representative(c))[0]) for c in classes.tolist()}
    n_first = np.zeros(ncls, dtype=np.int64)
    for c, sw in first.items():
        n_first[c] = len(sw)
    # one entry per (host, class, first hop)
    k = n_first[c_of]
    pair_of = np.repeat(np.arange(len(hc)), k)
    offsets = np.zeros(ncls + 1, dtype=np.int64)
    np.cumsum(n_first, out=offsets[1:])
    flat = np.zeros(int(offsets[-1]), dtype=np.int64)
    for c, sw in first.items():
        flat[offsets[c]:offsets[c + 1]] = sw
    pos = np.arange(len(pair_of)) - np.repeat(np.cumsum(k) - k, k)
    sw_of = flat[np.repeat(offsets[c_of], k) + pos]
    h_rep = h_of[pair_of]
    # each distinct (host, switch) port once: its links, their rates, whether it is NVLink
    nodes = max(g.nodes, default=-1) + 1
    hs, hs_inv = np.unique(h_rep * nodes + sw_of, return_inverse=True)
    ph, ps = np.divmod(hs, nodes)
    ids, counts = links.links_between(ph, ps)
    link_pair = np.repeat(np.arange(len(hs)), counts)
    nv_domain = np.zeros(nodes, dtype=bool)
    for n, d in g.nodes(data="domain"):
        nv_domain[n] = d == "nvlink"
    nv = nv_domain[ps].copy()
    np.logical_or.at(nv, link_pair, links.kind[ids] == "nvlink")
    rate = links.rate_bps[ids]
    sender = int(rate.sum())
    nic = int(rate[~nv[link_pair]].sum())
    # a (host, class) pair leaves by a NIC port when one of its first hops is not NVLink
    out = np.zeros(len(hc), dtype=bool)
    np.logical_or.at(out, pair_of, ~nv[hs_inv.ravel()])
    return sender, nic, np.unique(c_of[out])


def declared_tables(msgs: pd.DataFrame, links: pd.DataFrame, outcome, recorder, engine: str,
                    sampling: bool) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The messages and links tables with every declared column (:mod:`fabricsim.engine.interface`),
    and ``summary["not_modelled"]``.

    The engine's core message columns and required link columns must be there
    (:class:`~fabricsim.errors.SimulationError` naming the missing ones otherwise). A group of
    optional columns (``Column.group``) the engine leaves out -- every column of it absent, or NA
    throughout, in tables with rows -- is NA (of the column's declared dtype, never 0) and gets the
    engine's reason from ``RunOutcome.not_modelled``, else :func:`~fabricsim.engine.interface.not_reported`'s;
    a group the engine states it does not model must hold no value. ``nics`` follows ``transport``;
    ``packet_latency`` is left out when no latency was recorded although payload was delivered;
    ``link_timeseries`` when the engine gave no link sample although ``sampling`` was on.
    """
    from ..engine.interface import (LINK_COLUMNS, MESSAGE_COLUMNS, NOT_MODELLED_KEYS, REQUIRED_LINK_COLUMNS,
                                    TRANSPORT_COLUMNS, not_reported)
    not_modelled = dict(outcome.not_modelled or {})
    unknown = [k for k in not_modelled if k not in NOT_MODELLED_KEYS]
    if unknown:
        raise SimulationError(f"engine {engine!r} states not_modelled {', '.join(map(repr, unknown))} (allowed: "
                              f"{', '.join(NOT_MODELLED_KEYS)}; fabricsim/engine/interface.py NOT_MODELLED_KEYS)")
    missing = [c for c in MESSAGE_COLUMNS if c not in msgs.columns]
    if missing:
        raise SimulationError(f"engine {engine!r} handed over messages without {', '.join(missing)} "
                              f"(every engine reports MESSAGE_COLUMNS, fabricsim/engine/interface.py)")
    if len(links):
        missing = [c for c in REQUIRED_LINK_COLUMNS if c not in links.columns]
        if missing:
            raise SimulationError(f"engine {engine!r} reported links without {', '.join(missing)}")
    tables = {"messages": (msgs, TRANSPORT_COLUMNS), "links": (links, LINK_COLUMNS)}
    members: dict[str, list] = {}
    for name, (frame, declared) in tables.items():
        for col, c in declared.items():
            if c.group:
                members.setdefault(c.group, []).append((name, col))

    def has_values(name, col):
        frame = tables[name][0]
        return col in frame.columns and bool(frame[col].notna().any())

    for key, cols in members.items():
        held = [f"{n}.{col}" for n, col in cols if has_values(n, col)]
        if key in not_modelled:
            if held:
                raise SimulationError(f"engine {engine!r} states {key} not modelled but reports {', '.join(held)}")
        elif not held and any(len(tables[n][0]) for n, _ in cols):
            not_modelled[key] = not_reported(engine, key)
    out = {}
    for name, (frame, declared) in tables.items():
        if name == "links" and not len(frame):
            out[name] = frame                  # no links reported: an empty table, as before
            continue
        # (in place: the engine's frames are the run's own, and a message table at cluster scale
        # is too large to copy for a few NA columns)
        for col, c in declared.items():
            if c.group and (col not in frame.columns
                            or (c.group in not_modelled and str(frame[col].dtype) != c.dtype)):
                frame[col] = pd.Series(pd.NA, index=frame.index, dtype=c.dtype)
        order = list(MESSAGE_COLUMNS) + list(TRANSPORT_COLUMNS) if name == "messages" else list(LINK_COLUMNS)
        if list(frame.columns[:len(order)]) != order:
            frame = frame[order + [c for c in frame.columns if c not in order]]
        out[name] = frame
    if "transport" in not_modelled and "nics" not in not_modelled:
        not_modelled["nics"] = ("no per-host NIC table: it is built from the messages' transport columns, not "
                                f"modelled here ({not_modelled['transport']})")
    delivered = int(msgs["delivered_bytes"].sum()) if len(msgs) else 0
    if "packet_latency" not in not_modelled and recorder.latency.count == 0 and delivered > 0:
        not_modelled["packet_latency"] = not_reported(engine, "packet_latency")
    if "link_timeseries" not in not_modelled and sampling and len(links) and not outcome.link_samples:
        not_modelled["link_timeseries"] = not_reported(engine, "link_timeseries")
    return out["messages"], out["links"], not_modelled


def _pct(values, q):
    if len(values) == 0:
        return None
    return float(np.percentile(values, q, method="inverted_cdf"))


def _num(x):
    if x is None:
        return None
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return None
    return x


def build_result(sim, recorder, outcome, wall_s: float, version: str) -> Result:
    """Assemble tables and summary from a finished engine run."""
    sc = sim.scenario
    simcfg = sc.simulation
    topo = sim.topology
    # the declared columns (engine/interface.py): those the engine leaves out are NA, and their
    # groups are in summary["not_modelled"] with the engine's reason or the declared default
    msgs, links, not_modelled = declared_tables(recorder.frame(), pd.DataFrame(outcome.links), outcome, recorder,
                                                simcfg.engine, sampling=sc.outputs.link_sample_interval != "off"
                                                and sc.outputs.link_sample_budget > 0)
    msgs = msgs.sort_values("message_id", kind="stable").reset_index(drop=True)
    for c in ("release_ps", "end_ps", "fct_ps"):
        msgs[c] = msgs[c].astype("Int64")
    # the messages as columns (a MessageTable already, or a list converted once); every
    # per-message figure below is computed over columns, once per distinct key
    table = MessageTable.from_messages(sim.messages)
    model = _ideal_model(sim)
    rows = table.row_of(msgs["message_id"].to_numpy(dtype=np.int64))
    ideal = model.fct_rows(table)[rows]
    msgs.insert(msgs.columns.get_loc("fct_ps") + 1, "ideal_fct_ps", pd.array(ideal, dtype="Int64"))
    msgs.insert(msgs.columns.get_loc("ideal_fct_ps") + 1, "slowdown",
                (msgs["fct_ps"].astype("Float64") / msgs["ideal_fct_ps"].astype("Float64")))
    msgs = add_tag_columns(msgs, table, rows)
    done = msgs[msgs["completed"]]

    duration_all = max(outcome.end_ps, 1)
    if len(links):
        names = _node_names(topo.graph)         # one lookup per node, then one gather per column
        links.insert(2, "src_name", pd.array(names[links["src"].to_numpy(dtype=np.int64)], dtype="str"))
        links.insert(4, "dst_name", pd.array(names[links["dst"].to_numpy(dtype=np.int64)], dtype="str"))
        links["utilisation"] = links["tx_bytes"].astype("float64") * 8e12 / (links["rate_bps"].astype("float64")
                                                                               * duration_all)

    # pattern window and effective bandwidth
    released = msgs[msgs["release_ps"].notna()]
    t0 = int(released["release_ps"].min()) if len(released) else 0
    t_end = int(done["end_ps"].max()) if len(done) else None
    all_done = len(done) == len(msgs) and len(msgs) > 0
    duration = (t_end - t0) if (t_end is not None and all_done) else None
    # capacity a sender can use: the union of its ports towards its destinations
    # (with PXN, a relayed message's payload enters the fabric from the relay GPU's ports)
    t_src, t_dst = np.asarray(table.src, dtype=np.int64), np.asarray(table.dst, dtype=np.int64)
    relay = model.relays(t_src, t_dst)
    host = np.where(relay < 0, t_src, relay)
    cls = model.pair_classes(host, t_dst)
    link_table = _link_table(sim)
    sender_capacity, nic_capacity, nic_cls = _sender_ports(model, link_table, topo.graph, host, cls)
    delivered = int(msgs["delivered_bytes"].sum())
    span = max((t_end if t_end is not None else outcome.end_ps) - t0, 1)
    if not all_done:
        span = max(outcome.end_ps - t0, 1)
    goodput_bps = delivered * 8 * PS_PER_S / span
    nic_msg = np.isin(cls, nic_cls)[rows] if len(host) else np.zeros(len(msgs), dtype=bool)
    nic_delivered = int(msgs["delivered_bytes"].to_numpy(dtype=np.int64)[nic_msg].sum())
    nic_goodput_bps = nic_delivered * 8 * PS_PER_S / span
    # ideal duration: the dependency-aware lower bound (critical path and port load with
    # release heads and delivery tails; fabricsim/analysis/bound.py)
    bound = LowerBound(model, table)
    ideal_pattern = bound.of(t0).duration_ps if len(released) else None
    all_active, all_active_why, window, min_window = _all_active(table, model, recorder, all_done, sender_capacity)

    lat = recorder.latency
    fct = done["fct_ps"].astype("int64").to_numpy() if len(done) else np.array([], dtype=np.int64)
    slow = done["slowdown"].astype("float64").to_numpy() if len(done) else np.array([])
    incomplete = msgs[~msgs["completed"]]
    offered = int(msgs["size_bytes"].sum())
    injected = outcome.counters.get("injected_payload_bytes")
    dropped_payload = int(outcome.counters.get("dropped_payload_bytes", 0))
    from .status import RESULTS_FORMAT, incomplete_note, run_status
    status = run_status(outcome.status, int(len(incomplete)))
    summary = {
        "results_format": RESULTS_FORMAT,
        "scenario": sc.name,
        "status": status,
        "seed": simcfg.seed,
        "engine": simcfg.engine,
        "kernel": outcome.counters.get("kernel", {}).get("ran", simcfg.kernel),
        "profile": sc.profile,
        "routing": sc.routing.name,
        "receiver": sc.receiver.name,
        "congestion_control": sc.congestion_control.name,
        "topology": {"name": topo.name, "hosts": topo.num_hosts, "switches": len(topo.switches),
                     "links": len(link_table) // 2},
        "messages": {
            "total": int(len(msgs)), "completed": int(len(done)), "incomplete": int(len(incomplete)),
            "incomplete_by_reason": {str(k): int(v) for k, v in incomplete["incomplete_reason"].value_counts().items()},
        },
        "bytes": {
            "offered_payload_bytes": offered,
            "injected_payload_bytes": injected,
            "delivered_payload_bytes": delivered,
            "dropped_payload_bytes": dropped_payload,
            "in_flight_payload_bytes": (injected - delivered) if injected is not None else None,
        },
        "pattern": {
            "first_release_ps": t0 if len(released) else None,
            "last_end_ps": t_end if all_done else None,
            "duration_ps": duration,
            "ideal_duration_ps": ideal_pattern,
        },
        "effective_bandwidth": {
            "goodput_bps": goodput_bps,
            "sender_capacity_bps": sender_capacity,
            "goodput_fraction": goodput_bps / sender_capacity if sender_capacity else None,
            "nic_capacity_bps": nic_capacity,
            "nic_goodput_bps": nic_goodput_bps,
            "nic_goodput_fraction": nic_goodput_bps / nic_capacity if nic_capacity else None,
            "completion_time_ratio": (ideal_pattern / duration) if (duration and ideal_pattern) else None,
            "goodput_while_all_active_fraction": all_active,
            "goodput_while_all_active_null_reason": all_active_why,
            "goodput_while_all_active_window_ps": window,
            "goodput_while_all_active_min_window_ps": min_window,
        },
        "fct": {"p50_ps": _pct(fct, 50), "p99_ps": _pct(fct, 99), "max_ps": int(fct.max()) if len(fct) else None,
                "mean_ps": float(fct.mean()) if len(fct) else None},
        "slowdown": {"p50": _pct(slow, 50), "p99": _pct(slow, 99), "max": float(slow.max()) if len(slow) else None,
                     "messages_over_4x": int((slow > VICTIM_SLOWDOWN).sum())},
        "packet_latency": {
            "count": int(lat.count), "p50_ps": _num(lat.percentile(50)), "p99_ps": _num(lat.percentile(99)),
            "p999_ps": _num(lat.percentile(99.9)), "mean_ps": _num(lat.mean()),
            "relative_error": lat.rel_error / 2,
        },
        "drops": ({"packets": None, "bytes_on_wire": None, "control_packets": None, "by_reason": {}}
                  if not_modelled.get("drops") else
                  {"packets": int(outcome.counters.get("dropped_packets", 0)),
                   "bytes_on_wire": int(links["dropped_bytes"].sum()) if len(links) else 0,
                   "control_packets": int(outcome.counters.get("dropped_control_packets", 0)),
                   "by_reason": {"buffer_full": int(links["drops_buffer_full"].sum()) if len(links) else 0}}),
        "transport": (dict.fromkeys(TRANSPORT_SUMMARY_KEYS) if not_modelled.get("transport")
                      else transport_summary(msgs, links, outcome)),
        "warnings": list(outcome.warnings),
        "links": {
            "max_utilisation": float(links["utilisation"].max()) if len(links) else None,
            "max_peak_queue_bytes": (None if not_modelled.get("queues") or not len(links)
                                     else int(links["peak_queue_bytes"].max())),
        },
        "not_modelled": not_modelled,
        # what the figures stand on, and which are estimates of the engine's model (RunOutcome.fidelity)
        "fidelity": dict(outcome.fidelity) if outcome.fidelity else
        {"engine": simcfg.engine, "model": f"not stated by the {simcfg.engine!r} engine", "estimated": None},
        "run": {
            "version": version, "status": status, "end_ps": outcome.end_ps, "wall_time_s": wall_s,
            "events": outcome.events, "events_per_s": outcome.events / wall_s if wall_s > 0 else None,
            "packet_hops": outcome.packet_hops,
            "packet_hops_per_s": outcome.packet_hops / wall_s if wall_s > 0 else None,
            **outcome.counters,
        },
    }
    note = incomplete_note(status, summary["messages"])
    if note is not None:
        summary["incomplete"] = note
    bin_ps = recorder.goodput_bin_ps
    gp = np.asarray(recorder.goodput, dtype=np.int64)
    goodput = pd.DataFrame({"bin_start_ps": np.arange(len(gp), dtype=np.int64) * bin_ps,
                            "bin_end_ps": (np.arange(len(gp), dtype=np.int64) + 1) * bin_ps,
                            "delivered_bytes": gp,
                            "goodput_bps": gp.astype("float64") * 8e12 / bin_ps})
    balance = summary["run"].pop("conservation", None)
    if balance is not None:
        summary["conservation"] = balance
    busy = summary["run"].pop("gpu_compute_busy_ps", None)
    if busy is not None:
        # simulation.compute: gpu -- how much of the pattern a GPU spent not computing
        gpus = sorted(set(msgs["src"]) | set(msgs["dst"]))
        per_gpu = {g: busy.get(g, 0) for g in gpus}
        summary["compute"] = {
            "mode": "gpu",
            "busy_ps_max": max(per_gpu.values()) if per_gpu else 0,
            "busy_ps_mean": sum(per_gpu.values()) / len(per_gpu) if per_gpu else 0,
            "exposed_communication_ps": (duration - max(per_gpu.values())) if duration and per_gpu else None,
            "exposed_communication_ps_mean": (duration - sum(per_gpu.values()) / len(per_gpu))
            if duration and per_gpu else None,
        }
    link_ts = link_timeseries(outcome)
    if outcome.link_samples_truncated:
        summary["run"]["link_timeseries_truncated"] = True
    collectives = collectives_table(msgs, bound)
    if len(collectives):
        summary["collectives"] = collectives_summary(collectives)
    # the bound holds for any schedule the engine can produce (analysis/bound.py); should a run
    # ever beat it, say so (and, under FABRICSIM_CHECK_BOUND=1, as the test suite sets, fail)
    beaten = []
    if duration and ideal_pattern and ideal_pattern > duration:
        beaten.append(f"the pattern ({ideal_pattern} > {duration} ps)")
    if len(collectives):
        over = collectives[collectives["ideal_time_ps"].astype("Float64") > collectives["time_ps"].astype("Float64")]
        beaten += [f"op {op}" for op in over["op"].head(3)] + (["..."] if len(over) > 3 else [])
    if beaten:
        text = ("the run beat its lower bound for " + ", ".join(beaten) + ": a case the bound's proof misses "
                "(docs/metrics.md, 'The lower bound'; please report it); completion ratios above 1 follow")
        if os.environ.get(CHECK_BOUND_ENV) == "1":
            raise SimulationError(f"{sc.name}: {text}")
        summary["warnings"].append(text)
    nics = pd.DataFrame() if not_modelled.get("transport") else nic_table(msgs, recorder.hists, outcome)
    return Result(summary=summary, messages=msgs, links=links, latency=lat.table(), goodput=goodput,
                  scenario=sc.model_dump(mode="json"), collectives=collectives, link_timeseries=link_ts,
                  nics=nics)


TRANSPORT_SUMMARY_KEYS = ("retransmitted_bytes", "retransmitted_bytes_by_cause", "duplicate_bytes",
                          "retransmission_timeouts", "out_of_order_fraction", "reorder_distance_max_packets",
                          "peak_reorder_bytes_per_nic", "ecn_marked_packets", "cnps", "naks", "pfc_pause_events",
                          "pfc_paused_ps_total")


def _total(col: pd.Series, how: str = "sum"):
    """Sum (or max) of a column, 0 if it has no rows, None if it is NA throughout (a column of a
    group the engine reports only in part: engine/interface.py)."""
    if not len(col):
        return 0
    if col.isna().all():
        return None
    return int(col.sum() if how == "sum" else col.max())


def transport_summary(msgs: pd.DataFrame, links: pd.DataFrame, outcome) -> dict:
    """Run-wide transport figures (docs/metrics.md, "Transport")."""
    rx = _total(msgs["received_packets"]) or 0
    ooo = float((msgs["out_of_order_fraction"] * msgs["received_packets"]).sum()) if rx else 0.0
    c = outcome.counters
    return {
        "retransmitted_bytes": _total(msgs["retransmitted_bytes"]),
        "retransmitted_bytes_by_cause": {k: _total(msgs[f"rtx_{k}_bytes"]) for k in ("sack", "timeout", "nak")},
        "duplicate_bytes": _total(msgs["duplicate_bytes"]),
        "retransmission_timeouts": int(c.get("retransmission_timeouts", 0)),
        "out_of_order_fraction": ooo / rx if rx else 0.0,
        "reorder_distance_max_packets": _total(msgs["reorder_distance_max_packets"], "max"),
        "peak_reorder_bytes_per_nic": max(outcome.host_peak_hold.values(), default=0),
        "ecn_marked_packets": _total(links["ecn_marked_packets"]) if len(links) else 0,
        "cnps": _total(msgs["cnps"]),
        "naks": _total(msgs["naks"]),
        "pfc_pause_events": int(c.get("pfc_pause_events", 0)),
        "pfc_paused_ps_total": _total(links["pfc_paused_ps"]) if len(links) else 0,
    }


def nic_table(msgs: pd.DataFrame, hists: list, outcome) -> pd.DataFrame:
    """One row per host: what its NIC saw receiving (reordering) and did sending (retransmissions)."""
    if not len(msgs):
        return pd.DataFrame()
    rx = msgs.groupby("dst").agg(
        received_packets=("received_packets", "sum"), duplicate_bytes=("duplicate_bytes", "sum"),
        ecn_marked_packets=("ecn_marked_packets", "sum"), reorder_overflow_bytes=("reorder_overflow_bytes", "sum"),
        discarded_out_of_order_bytes=("discarded_out_of_order_bytes", "sum"))
    msgs = msgs.assign(_ooo=msgs["out_of_order_fraction"] * msgs["received_packets"],
                       _wait=msgs["reorder_delay_mean_ps"] * msgs["received_packets"])
    extra = msgs.groupby("dst").agg(_ooo=("_ooo", "sum"), _wait=("_wait", "sum"),
                                    reorder_delay_max_ps=("reorder_delay_max_ps", "max"))
    rx = rx.join(extra)
    denom = rx["received_packets"].where(rx["received_packets"] > 0)
    rx["out_of_order_fraction"] = (rx.pop("_ooo") / denom).fillna(0.0)
    rx["reorder_delay_mean_ps"] = (rx.pop("_wait") / denom).fillna(0.0)
    merged: dict[int, dict] = {}
    for _src, dst, h in hists:
        acc = merged.setdefault(dst, {})
        for k, v in h.items():
            acc[k] = acc.get(k, 0) + v
    rx["reorder_distance_p50_packets"] = [hist_percentile(merged.get(h, {}), 50) for h in rx.index]
    rx["reorder_distance_p99_packets"] = [hist_percentile(merged.get(h, {}), 99) for h in rx.index]
    rx["reorder_distance_max_packets"] = [max(merged.get(h, {}), default=0) for h in rx.index]
    rx["peak_reorder_bytes"] = [int(outcome.host_peak_hold.get(h, 0)) for h in rx.index]
    tx = msgs.groupby("src").agg(
        retransmitted_bytes=("retransmitted_bytes", "sum"), rtx_sack_bytes=("rtx_sack_bytes", "sum"),
        rtx_timeout_bytes=("rtx_timeout_bytes", "sum"), rtx_nak_bytes=("rtx_nak_bytes", "sum"),
        cnps_received=("cnps", "sum"), naks_received=("naks", "sum"))
    out = rx.join(tx, how="outer").fillna(0)
    out.index.name = "host"
    for col in out.columns:
        if col not in ("out_of_order_fraction", "reorder_delay_mean_ps"):
            out[col] = out[col].astype("int64")
    return out.reset_index()


def _link_count(links) -> int:
    """Links in ``RunOutcome.links`` (a list of rows or a dict of columns)."""
    if isinstance(links, dict):
        return len(next(iter(links.values()))) if links else 0
    return len(links)


def _link_column(links, name: str):
    """One column of ``RunOutcome.links`` (a list of rows or a dict of columns)."""
    return links[name] if isinstance(links, dict) else [row[name] for row in links]


def link_timeseries(outcome) -> pd.DataFrame:
    """Long table from the engine's periodic link samples (``outputs.link_sample_interval``):
    one row per link and interval ``[bin_start_ps, bin_end_ps)`` with the wire bytes that left the
    port in it,
    utilisation = bytes x 8 / (rate x interval) and ``queue_bytes`` queued at the interval's end."""
    cols = ["link_id", "bin_start_ps", "bin_end_ps", "tx_bytes", "utilisation", "queue_bytes"]
    samples = outcome.link_samples
    if len(samples) < 2 or not _link_count(outcome.links):
        return pd.DataFrame(columns=cols)
    times = np.array([s[0] for s in samples], dtype=np.int64)
    tx = np.array([s[1] for s in samples], dtype=np.int64)          # samples x links, cumulative sent
    # an engine without queues (the flow engine) samples None: queue_bytes is NA
    q = None if samples[0][2] is None else np.array([s[2] for s in samples], dtype=np.int64)
    keep = np.diff(times) > 0
    start, end = times[:-1][keep], times[1:][keep]
    # each sample holds the wire bytes that had left the port by then (the engine's definition
    # per port kind, see PacketEngine._snapshot): a bin's bytes are the difference
    sent = np.diff(tx, axis=0)[keep]
    rates = np.asarray(_link_column(outcome.links, "rate_bps"), dtype=np.float64)
    ids = np.asarray(_link_column(outcome.links, "link_id"), dtype=np.int64)
    n_bins, n_links = sent.shape
    util = sent * 8e12 / (rates[None, :] * (end - start)[:, None])
    return pd.DataFrame({
        "link_id": np.tile(ids, n_bins), "bin_start_ps": np.repeat(start, n_links),
        "bin_end_ps": np.repeat(end, n_links), "tx_bytes": sent.ravel(), "utilisation": util.ravel(),
        "queue_bytes": (q[1:][keep].ravel() if q is not None
                        else na_ints(n_bins * n_links))})


def summary_json(summary: dict) -> str:
    return json.dumps(summary, indent=2, default=lambda o: o.item() if hasattr(o, "item") else str(o))
