"""The compiled packet core (``simulation.kernel: compiled``, fabricsim/engine/compiled/):
bit-identical to ``heap`` on the cases docs/compiled-core.md section 5 adds to the equivalence
suite, the shared model arithmetic equal in both kernels, and the fallback rule.

tests/test_kernel_equivalence.py runs every routing policy, receiver and CC case on ``compiled``
too; the cases here reach what those do not: link sampling on (``pending()``, the sampler's
re-arm, the final snapshot), timeouts and failures (``retry_limit``), a run cut by its time limit
with packets in flight, ECN sampled at enqueue, unbounded buffers, two serialisation rates,
dependencies with compute gaps and GPU jobs, a time limit beyond 2**40 ps, and adaptive timeouts
(``receiver.rto_mode: adaptive``: the RTT estimator, back-off with jitter draws, timeout probes,
D-SACKs and the tail-loss probe, failures at the retry limit), the go-back-N receiver (NAKs
and rewinds after drops and from reordering, stale NAKs, its timeouts and retry limit), and ACK
coalescing (``receiver.ack_every > 1``) with both receivers and both timer modes: the delayed-ACK
timer, SACK bitmaps and RACK within their reach, late units acknowledged by name, the adaptive
timeout's wait allowance, probes within the bitmap's reach, bitmaps in flight when a run is cut.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest

import fabricsim
from fabricsim.flows import identity
from fabricsim.net import switch as switch_mod
from fabricsim.routing import ecmp

from test_kernel_equivalence import FABRIC, _comparable

pytest.importorskip("numba")


def _small(**over):
    sc = {"name": "cc_perm", "topology": dict(FABRIC),
          "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB"},
          "routing": {"policy": "spray"}, "simulation": {"seed": 1, "time_limit": "20ms"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


def _lossy_incast(**over):
    sc = {"name": "cc_incast", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"}},
          "traffic": {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "256KiB"},
          "routing": {"policy": "ecmp"},
          "switch": {"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"}},
          "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


def _pfc_incast(**over):
    """An incast into a lossless fabric whose thresholds (xoff 20 KB, xon 10 KB) pause both the
    senders' NIC ports and the spines' ports towards the receiver's leaf (congestion spreading),
    with ECN sampled at dequeue (LosslessPort._start's marking)."""
    sc = _lossy_incast(switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "48KB"},
                               "pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}},
                       traffic={"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "128KiB"})
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


def _all_to_all(**receiver):
    """Every host to every other over 100G host links, 3 queue pairs each, into 32 KiB buffers, with
    adaptive timeouts: 21 queue pairs share each NIC, so a unit presumed lost can still wait for its
    turn when the timer fires (the probe then goes to the earliest unit sent, not the lowest PSN)."""
    return {"name": "cc_a2a", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"},
                                           "host_link": {"rate": "100Gbps", "delay": "500ns"}},
            "traffic": {"pattern": "all_to_all", "message_size": "128KiB", "qps_per_message": 3},
            "routing": {"policy": "spray"}, "receiver": {"rto_mode": "adaptive", **receiver},
            "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}


def _dependent_trace(tmp_path):
    """Three rounds of a ring over 8 GPUs: each message waits for the one its source received in
    the round before, then a compute gap; some sources start late."""
    rows, last = ["id,src,dst,size_bytes,start_ps,gap_ps,deps,conn"], {}
    mid = 0
    for step in range(3):
        cur = {}
        for h in range(8):
            dep = last.get(h)
            rows.append(f"{mid},{h},{(h + 1) % 8},{32768 + 4096 * h},{2_000_000 * step if h % 3 == 1 else 0},"
                        f"{0 if dep is None else 1_500_000 + 250_000 * (h % 2)},{'' if dep is None else dep},-1")
            cur[(h + 1) % 8] = mid
            mid += 1
        last = cur
    p = tmp_path / "ring.csv"
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def _late_trace(tmp_path):
    rows = ["id,src,dst,size_bytes,start_ps,gap_ps,deps,conn"]
    rows += [f"{h},{h},{(h + 4) % 8},65536,{1_200_000_000_000 + 1000 * h},0,,-1" for h in range(8)]
    p = tmp_path / "late.csv"
    p.write_text("\n".join(rows) + "\n")
    return str(p)


def _planes(ports=2, split="per_packet", traffic=None, topology=None, **over):
    """A multi-plane cluster without NVLink (2 nodes of 8 GPUs): every GPU's NIC has ``ports``
    ports, one per plane, and a queue pair uses them all (``per_packet``: each packet by the port
    free first, and the receiver's control packets spread over its ports by ``reply_nic``'s
    rotation) or one (``per_flow``)."""
    sc = {"name": "cc_planes", "topology": {"kind": "cluster", "domain": "none", "nodes": 2,
                                             "nic": {"ports": ports, "rate": "400Gbps"}, **(topology or {})},
          "traffic": traffic or {"pattern": "all_to_all", "message_size": "64KiB"},
          "routing": {"policy": "spray"}, "nic": {"plane_split": split},
          "simulation": {"seed": 1, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


#: an incast over two planes into 32 KiB buffers: drops, timeouts, resends through both planes
_PLANES_INCAST = dict(traffic={"pattern": "incast", "senders": 10, "receiver": 0, "message_size": "256KiB",
                               "qps_per_message": 2},
                      topology={"switch": {"buffer": {"mode": "per_port", "size": "32KiB"}}},
                      switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB"}})

def _nvl(topology=None, traffic=None, **over):
    """An NVL36 rack: NVLink with credit flow control (net/nvlink.py) between every pair of its 36
    GPUs, through 18 chips."""
    sc = {"name": "cc_nvl", "topology": {"kind": "nvl72_rack", "domain_size": 36, **(topology or {})},
          "traffic": traffic or {"pattern": "incast", "senders": 20, "receiver": 3, "message_size": "256KiB"},
          "routing": {"policy": "spray"}, "simulation": {"seed": 2, "time_limit": "20ms"},
          "outputs": {"link_sample_interval": "off"}}
    for k, v in over.items():
        sc[k] = {**sc.get(k, {}), **v} if isinstance(v, dict) else v
    return sc


def _csv(tmp_path, rows, name="m.csv"):
    path = tmp_path / name
    path.write_text("src,dst,size_bytes\n" + "".join(f"{s},{d},{b}\n" for s, d, b in rows))
    return {"pattern": "csv", "path": str(path)}


def _two_racks(tmp_path):
    """2 NVL36 racks with 2 x 400G NIC ports per GPU: every GPU sends 1 MiB to a GPU of the other
    rack (NIC planes, RoCE) and 512 KiB to one of its own (NVLink)."""
    rows = []
    for i in range(36):
        rows += [(i, 36 + (i * 7) % 36, 2**20), (36 + i, (i * 5) % 36, 2**20), (i, (i + 3) % 36, 2**19)]
    return _csv(tmp_path, rows, "two_racks.csv")


_RACKS = {"kind": "cluster", "domain": "nvl36", "racks": 2, "nic": {"ports": 2, "rate": "400Gbps"}}


def _pxn(traffic=None, chunk="16KiB", topology=None, **over):
    """PXN (``nic.pxn``) on 2 HGX nodes with 2 NIC planes: a message to another node whose
    destination is on another rail first moves over NVLink to the sender's peer on that rail, in
    ``chunk`` pieces, each sent on by the peer's NIC as soon as it is in."""
    return _planes(topology=topology or {"domain": "hgx8"},
                   traffic=traffic or {"pattern": "all_to_all", "message_size": "64KiB"},
                   nic={"plane_split": "per_packet", "pxn": True, "pxn_chunk": chunk}, **over)


#: an incast of 30 GPUs into GPU 40 of the other of 2 NVL36 racks, relayed by PXN, into 16 KiB buffers
_PXN_INCAST = dict(traffic={"pattern": "incast", "senders": 30, "receiver": 40, "message_size": "256KiB"},
                   topology={**_RACKS, "nodes": None, "switch": {"buffer": {"size": "16KiB"}}}, chunk="64KiB")

CASES = {
    "sampling-on": lambda tmp: _small(),                                  # link samples every 10 us
    "sampling-on-ecmp-seed2": lambda tmp: _small(routing={"policy": "ecmp"}, simulation={"seed": 2}),
    "timeouts": lambda tmp: _lossy_incast(receiver={"rto_low": "8us", "rto_high": "12us"}),
    "retry-limit-0": lambda tmp: _lossy_incast(receiver={"rto_low": "8us", "rto_high": "12us", "retry_limit": 0}),
    "time-limit-cut": lambda tmp: _small(simulation={"time_limit": "12us"}),
    "ecn-at-enqueue": lambda tmp: _lossy_incast(switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB",
                                                                "sample": "enqueue"}}),
    "unbounded-buffers": lambda tmp: _lossy_incast(topology={**FABRIC, "buffer": {"size": "unbounded"}}),
    "100G-hosts": lambda tmp: _small(topology={**FABRIC, "host_link": {"rate": "100Gbps", "delay": "500ns"}}),
    # rates that do not divide 8e12 bit-ps (no whole ps per byte): serialisation rounds up, and the
    # backlog in bytes behind a drop-tail or ECN decision rounds down, at 300 and 333 Gbit/s
    "rates-not-dividing-8e12": lambda tmp: _lossy_incast(
        topology={**FABRIC, "buffer": {"mode": "per_port", "size": "32KiB"},
                  "host_link": {"rate": "333Gbps", "delay": "500ns"}, "fabric_link": {"rate": "300Gbps", "delay": "500ns"}},
        switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "24KB", "sample": "enqueue"}}),
    "rates-not-dividing-8e12-adaptive": lambda tmp: _small(
        topology={**FABRIC, "host_link": {"rate": "333Gbps", "delay": "500ns"}, "fabric_link": {"rate": "300Gbps", "delay": "500ns"}},
        routing={"policy": "adaptive"}),
    "dependencies-gpu-compute": lambda tmp: {
        "name": "cc_ring", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "128KiB"}},
        "traffic": {"pattern": "csv", "path": _dependent_trace(tmp), "qps_per_message": 2},
        "routing": {"policy": "spray"}, "simulation": {"seed": 2, "compute": "gpu"}},
    "times-beyond-2^40ps": lambda tmp: {                       # messages start at 1.2 s (2^40 ps = 1.1 s)
        "name": "cc_late", "topology": dict(FABRIC),
        "traffic": {"pattern": "csv", "path": _late_trace(tmp)}, "routing": {"policy": "spray"},
        "simulation": {"seed": 3, "time_limit": "2s"},
        "outputs": {"timeseries_bin": "100us", "link_sample_interval": "off"}},
    # adaptive routing: remote grades over parallel spine links (a next switch with several ports
    # towards the destination), without remote grades, and with a coarse refresh under loss
    "adaptive-remote-parallel-links": lambda tmp: _small(
        topology={**FABRIC, "links_per_spine": 2, "fabric_link": {"rate": "100Gbps", "delay": "500ns"}},
        routing={"policy": "adaptive", "queue_ref": "64KiB", "remote_ref": "64KiB"}),
    "adaptive-local-only": lambda tmp: _small(routing={"policy": "adaptive", "remote": False},
                                              simulation={"seed": 2}),
    "adaptive-lossy-incast": lambda tmp: _lossy_incast(routing={"policy": "adaptive", "refresh": "1us",
                                                                "remote_period": "500ns"}),
    # adaptive timeouts: probes and their D-SACKs after drops (ECMP), under spraying's reordering with a
    # tight reorder window (D-SACK widening), with the RTT floor under adaptive routing, with queue
    # pairs waiting on busy NICs (probes of the earliest unit sent; the tail-loss probe), and backed
    # off to a small rto_max until the retry limit fails the messages (no jitter)
    "rto-adaptive-incast": lambda tmp: _lossy_incast(receiver={"rto_mode": "adaptive"}),
    "rto-adaptive-spray-reordering": lambda tmp: _lossy_incast(
        topology={**FABRIC, "buffer": {"mode": "per_port", "size": "16KiB"}}, routing={"policy": "spray"},
        receiver={"rto_mode": "adaptive", "rto_min": "2us", "reorder_window": "300ns"}),
    "rto-adaptive-rttvar-floor": lambda tmp: _lossy_incast(
        routing={"policy": "adaptive"}, receiver={"rto_mode": "adaptive", "rto_rttvar_mult": 4, "rto_jitter": 4}),
    "rto-adaptive-busy-nics": lambda tmp: _all_to_all(rto_min="1us", retry_limit=50),
    "rto-adaptive-busy-nics-tlp": lambda tmp: _all_to_all(retry_limit=20),
    # (8 KiB buffers hold two 4 KiB units: ACKs are dropped too, so a resend of a unit whose ACK was
    #  lost is D-SACKed, and RACK's window widens from a D-SACK)
    "rto-adaptive-dsack-of-a-resend": lambda tmp: {
        "name": "cc_perm_tight", "topology": {**FABRIC, "leaves": 3, "spines": 4, "buffer": {"mode": "per_port", "size": "8KiB"},
                                              "host_link": {"rate": "100Gbps", "delay": "500ns"},
                                              "fabric_link": {"rate": "200Gbps", "delay": "500ns"}},
        "traffic": {"pattern": "permutation", "message_size": "256KiB"}, "routing": {"policy": "adaptive"},
        "receiver": {"rto_mode": "adaptive", "retry_limit": 50, "reorder_window": "1us", "rto_jitter": 0},
        "simulation": {"seed": 170, "time_limit": "5ms", "mtu": "4KiB"}, "outputs": {"link_sample_interval": "off"}},
    # (an oversubscribed all-to-all of 1 KiB units on 100G spine links, sprayed: thousands of probes,
    #  and outputs that change if the tail-loss probe's D-SACK did not advance RACK or a D-SACKed
    #  resend did not widen the reorder window)
    "rto-adaptive-a2a-oversubscribed": lambda tmp: {
        "name": "cc_a2a_over", "topology": {**FABRIC, "leaves": 3, "buffer": {"mode": "per_port", "size": "64KiB"},
                                            "fabric_link": {"rate": "100Gbps", "delay": "500ns"}},
        "traffic": {"pattern": "all_to_all", "message_size": "64KiB", "qps_per_message": 3},
        "routing": {"policy": "spray"},
        "receiver": {"rto_mode": "adaptive", "rto_min": "1us", "retry_limit": 50, "reorder_window": "1us",
                     "rto_jitter": 0},
        "simulation": {"seed": 293, "time_limit": "5ms", "mtu": "1KiB"}, "outputs": {"link_sample_interval": "off"}},
    "rto-adaptive-retry-limit": lambda tmp: _lossy_incast(
        receiver={"rto_mode": "adaptive", "rto_min": "1us", "rto_max": "3us", "rto_jitter": 0, "retry_limit": 2}),
    # go-back-N: NAKs and rewinds after drops with short fixed timeouts (rewinds on timeout too, stale
    # NAKs ignored), NAKs from spraying's reordering alone (no drops), adaptive timeouts under
    # adaptive routing (the RTT floor rto_rttvar_mult 4 by default; D-SACKs of resent duplicates), and
    # the retry limit
    "gbn-lossy-incast": lambda tmp: _lossy_incast(receiver={"model": "go_back_n", "rto_low": "8us", "rto_high": "12us"}),
    "gbn-spray-reordering": lambda tmp: _small(receiver={"model": "go_back_n"}, outputs={"link_sample_interval": "off"}),
    "gbn-rto-adaptive": lambda tmp: _lossy_incast(routing={"policy": "adaptive"},
                                                  receiver={"model": "go_back_n", "rto_mode": "adaptive"}),
    "gbn-rto-adaptive-spray": lambda tmp: _lossy_incast(
        topology={**FABRIC, "buffer": {"mode": "per_port", "size": "16KiB"}}, routing={"policy": "spray"},
        receiver={"model": "go_back_n", "rto_mode": "adaptive", "rto_min": "2us", "rto_rttvar_mult": 0}),
    "gbn-retry-limit": lambda tmp: _lossy_incast(
        receiver={"model": "go_back_n", "rto_mode": "adaptive", "rto_min": "1us", "rto_max": "3us", "rto_jitter": 0,
                  "retry_limit": 2}),
    # PFC (net/lossless.py): an incast that pauses NIC and switch ports, under each compiled routing
    # policy (adaptive sees a paused port's PAUSED_PENALTY_PS) and receiver; ECN at enqueue; link
    # samples of lossless queues; a run cut while ports are paused and queues hold packets; rates
    # that do not divide 8e12 (the queue's drain time in int64); go-back-N's timeouts behind pauses;
    # a shared-buffer topology (lossless switches enforce no buffer); an all-to-all at 100G hosts
    **{f"pfc-{p}-{r}": (lambda tmp, p=p, r=r: _pfc_incast(routing={"policy": p}, receiver={"model": r}))
       for p in ("ecmp", "spray", "adaptive") for r in ("ddp", "go_back_n")},
    "pfc-ecn-at-enqueue": lambda tmp: _pfc_incast(switch={"ecn": {"enabled": True, "kmin": "8KB", "kmax": "48KB",
                                                                  "sample": "enqueue"}}),
    "pfc-sampling-on": lambda tmp: _pfc_incast(routing={"policy": "spray"}, outputs={"link_sample_interval": "1us"}),
    "pfc-time-limit-cut": lambda tmp: _pfc_incast(simulation={"time_limit": "9us"}),
    "pfc-rates-not-dividing-8e12": lambda tmp: _pfc_incast(
        topology={**FABRIC, "host_link": {"rate": "333Gbps", "delay": "500ns"},
                  "fabric_link": {"rate": "300Gbps", "delay": "500ns"}}, routing={"policy": "adaptive"}),
    "pfc-gbn-timeouts": lambda tmp: _pfc_incast(routing={"policy": "spray"},
                                               receiver={"model": "go_back_n", "rto_low": "3us", "rto_high": "4us"}),
    "pfc-shared-buffer": lambda tmp: _pfc_incast(topology={**FABRIC, "buffer": {"mode": "shared", "size": "64KiB"}}),
    "pfc-all-to-all": lambda tmp: {**_all_to_all(), "receiver": {},
                                   "switch": {"pfc": {"enabled": True, "xoff": "30KB", "xon": "20KB",
                                                      "response": "300ns"}}},
    # hosts with several NIC ports (multi-plane NICs): per-packet over 2 or 4 planes under each routing
    # policy (the receiver's ACKs rotate over its ports), per-flow with several queue pairs, link samples,
    # drops and timeouts, go-back-N, adaptive timeouts and PFC over the planes, a failed plane (hosts with
    # fewer ports: some pairs reply on one fixed port), and NVLink chips run as RoCE switches (each GPU
    # has NVLink and NIC ports; which of them are eligible depends on the destination)
    **{f"planes-per-packet-{p}": (lambda tmp, p=p: _planes(routing={"policy": p})) for p in ("ecmp", "spray", "adaptive")},
    "planes-4-ports-per-packet": lambda tmp: _planes(ports=4, routing={"policy": "ecmp"},
                                                     traffic={"pattern": "permutation", "message_size": "1MiB"}),
    "planes-per-flow-3qps": lambda tmp: _planes(ports=4, split="per_flow",
                                                traffic={"pattern": "all_to_all", "message_size": "64KiB",
                                                         "qps_per_message": 3}),
    "planes-sampling-on": lambda tmp: _planes(outputs={"link_sample_interval": "1us"}),
    "planes-lossy-incast": lambda tmp: _planes(**_PLANES_INCAST, receiver={"rto_low": "8us", "rto_high": "12us"}),
    "planes-gbn": lambda tmp: _planes(**_PLANES_INCAST, receiver={"model": "go_back_n", "rto_low": "8us",
                                                                  "rto_high": "12us"}),
    "planes-rto-adaptive": lambda tmp: _planes(**_PLANES_INCAST, receiver={"rto_mode": "adaptive"}),
    "planes-pfc": lambda tmp: _planes(**{**_PLANES_INCAST, "switch": {"pfc": {"enabled": True, "xoff": "20KB",
                                                                              "xon": "10KB"}}},
                                      routing={"policy": "adaptive"}),
    "planes-failed-plane": lambda tmp: _planes(ports=4, topology={"failed": {"links": [["p1.leaf0", "n0.g0"],
                                                                                      ["p2.leaf1", "n1.g1"]]}},
                                               traffic={"pattern": "all_to_all", "message_size": "32KiB"}),
    "planes-nvlink-as-roce": lambda tmp: _planes(topology={"domain": "hgx8", "nvlink": {"transport": "roce"}}),
    # NVLink domains with credit flow control (nvlink.transport: credit): an incast that stalls the senders'
    # links for credit (the chip kicks them), striped or adaptive over the links, per flow, a one-unit credit
    # buffer on one chip, 1 KiB units of 128 B packets with short last units, the crossbar, a failed chip and a
    # failed link, link samples of the chips' backlogs, a run cut with units in flight; and clusters whose GPUs
    # have NVLink and NIC ports: 2 HGX nodes all-to-all (NVLink inside a node, 2 planes across), 2 NVL36
    # racks under adaptive routing, per flow with samples, with PFC, and lossy with adaptive timeouts
    "nvlink-incast-stripe": lambda tmp: _nvl(topology={"nvlink": {"credit_buffer": "16KiB"}}),
    "nvlink-incast-adaptive-spread": lambda tmp: _nvl(topology={"nvlink": {"credit_buffer": "16KiB",
                                                                           "spread": "adaptive"}}),
    "nvlink-per-flow": lambda tmp: _nvl(traffic={"pattern": "all_to_all", "message_size": "16KiB",
                                                 "qps_per_message": 3}, nic={"plane_split": "per_flow"}),
    "nvlink-one-unit-credit": lambda tmp: _nvl(topology={"nvlink": {"chips": 1, "credit_buffer": 242}},
                                               traffic=_csv(tmp, [(0, 5, 8 * 4096), (1, 5, 3 * 4096)])),
    "nvlink-framing-odd-sizes": lambda tmp: _nvl(
        topology={"nvlink": {"chips": 3, "packet_payload": "128B", "packet_header": "32B", "unit": "1KiB"}},
        traffic={"pattern": "all_to_all", "message_size": "3000B", "qps_per_message": 2}),
    "nvlink-crossbar": lambda tmp: _nvl(topology={"domain_size": 72, "nvlink": {"model": "crossbar"}},
                                        traffic={"pattern": "permutation", "message_size": "256KiB"}),
    "nvlink-failed-chip": lambda tmp: _nvl(topology={"failed": {"switches": ["r0.nvs3"]}},
                                           traffic={"pattern": "permutation", "message_size": "1MiB"}),
    "nvlink-failed-link": lambda tmp: _nvl(topology={"domain_size": 72, "failed": {"links": [["r0.g5", "r0.nvs2"]]}},
                                           traffic=_csv(tmp, [(0, 5, 2**20), (1, 5, 2**20)])),
    "nvlink-sampling-on": lambda tmp: _nvl(outputs={"link_sample_interval": "1us"}),
    "nvlink-time-limit-cut": lambda tmp: _nvl(simulation={"time_limit": "5us"}),
    "nvlink-hgx-nodes-all-to-all": lambda tmp: _planes(topology={"domain": "hgx8"}),
    "nvlink-racks-adaptive": lambda tmp: {"name": "cc_racks", "topology": _RACKS, "traffic": _two_racks(tmp),
                                          "routing": {"policy": "adaptive"}, "simulation": {"seed": 3}},
    "nvlink-racks-per-flow-sampling": lambda tmp: {"name": "cc_racks", "topology": _RACKS,
                                                   "traffic": _two_racks(tmp), "routing": {"policy": "ecmp"},
                                                   "nic": {"plane_split": "per_flow"}, "simulation": {"seed": 3},
                                                   "outputs": {"link_sample_interval": "2us"}},
    "nvlink-racks-pfc": lambda tmp: {"name": "cc_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "64KiB"}}},
                                     "traffic": _two_racks(tmp), "routing": {"policy": "spray"},
                                     "switch": {"pfc": {"enabled": True, "xoff": "20KB", "xon": "10KB"}},
                                     "simulation": {"seed": 3}},
    "nvlink-racks-lossy-rto-adaptive": lambda tmp: {
        "name": "cc_racks", "topology": {**_RACKS, "switch": {"buffer": {"size": "16KiB"}}},
        "traffic": _two_racks(tmp), "routing": {"policy": "spray"}, "receiver": {"rto_mode": "adaptive"},
        "simulation": {"seed": 3}},
    # PXN: relayed all-to-all (pieces of 16 KiB, and of 20 KiB with a short last one, with link samples),
    # a relayed incast that drops, with adaptive timeouts, and one whose pieces fail at the retry limit
    "pxn-all-to-all": lambda tmp: _pxn(),
    "pxn-odd-chunks-sampling": lambda tmp: _pxn(chunk="20KiB", outputs={"link_sample_interval": "1us"}),
    "pxn-incast-rto-adaptive": lambda tmp: _pxn(**_PXN_INCAST, receiver={"rto_mode": "adaptive", "retry_limit": 20}),
    "pxn-incast-retry-limit": lambda tmp: _pxn(**_PXN_INCAST, receiver={"rto_low": "4us", "rto_high": "4us",
                                                                        "retry_limit": 0}),
}


def _run(sc, kernel):
    sc = {**sc, "simulation": {**sc.get("simulation", {}), "kernel": kernel}}
    return fabricsim.run(sc)


@pytest.mark.parametrize("case", list(CASES))
def test_compiled_core_gives_the_heap_kernels_tables(case, tmp_path):
    sc = CASES[case](tmp_path)
    a = _run(sc, "heap")
    b = _run(sc, "compiled")
    assert b.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}
    assert b.summary["kernel"] == "compiled" and a.summary["kernel"] == "heap"
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    assert _comparable(a.summary) == _comparable(b.summary)
    assert a.summary["run"]["events"] == b.summary["run"]["events"]       # the same agenda entries
    for table in ("latency", "goodput", "link_timeseries", "nics", "collectives"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    # each case reaches what it is for
    run = a.summary["run"]
    if case.startswith("sampling-on"):
        assert len(a.link_timeseries)
    if case == "timeouts":
        assert run["retransmission_timeouts"] > 0 and a.summary["status"] == "complete"
    if case == "retry-limit-0":
        assert a.summary["status"] == "incomplete_failed"
    if case == "time-limit-cut":
        assert a.summary["status"] == "time_limit" and run["in_network_payload_bytes"] > 0
    if case in ("ecn-at-enqueue", "timeouts"):
        assert a.links["ecn_marked_packets"].sum() > 0
    if case == "unbounded-buffers":
        assert a.links["drops_buffer_full"].sum() == 0
    if case == "times-beyond-2^40ps":
        assert a.summary["pattern"]["last_end_ps"] > 2**40
    if case.startswith("adaptive-") or case == "rates-not-dividing-8e12-adaptive":
        assert a.messages["out_of_order_fraction"].max() > 0            # per-packet choices reorder
    if case == "rates-not-dividing-8e12":
        assert a.links["drops_buffer_full"].sum() > 0 and a.links["ecn_marked_packets"].sum() > 0
    if case.startswith("rto-adaptive"):
        assert a.summary["status"] == ("incomplete_failed" if case == "rto-adaptive-retry-limit" else "complete")
        if case != "rto-adaptive-dsack-of-a-resend":
            assert run["retransmission_timeouts"] > 0 and run["timeout_probes"] > 0
        if case != "rto-adaptive-rttvar-floor":
            assert run["dsacks_received"] > 0 and run["spurious_retransmissions_detected"] > 0
        if case not in ("rto-adaptive-rttvar-floor", "rto-adaptive-dsack-of-a-resend"):
            assert run["spurious_timeout_probes"] > 0
    if case.startswith("pfc-"):
        links = a.links
        assert links["pfc_paused_ps"].sum() > 0 and run["dropped_packets"] == 0
        assert a.summary["status"] == ("time_limit" if case == "pfc-time-limit-cut" else "complete")
        hosts = links["src"] < 8                             # (FABRIC: hosts 0-7)
        if case != "pfc-all-to-all":                         # NIC ports and switch ports paused
            assert (links["pfc_pause_events"][hosts] > 0).any() and (links["pfc_pause_events"][~hosts] > 0).any()
        if case == "pfc-time-limit-cut":
            assert run["in_network_payload_bytes"] > 0
        if case == "pfc-sampling-on":
            assert len(a.link_timeseries)
        if case == "pfc-gbn-timeouts":
            assert run["retransmission_timeouts"] > 0
        if case in ("pfc-ecn-at-enqueue", "pfc-ecmp-ddp"):
            assert links["ecn_marked_packets"].sum() > 0
    if case.startswith("planes-"):
        L = a.links
        up = L[(L["kind"] == "host-leaf") & L["dst_name"].str.startswith("p")]      # GPU -> leaf of plane p
        if "per-packet" in case or case in ("planes-sampling-on", "planes-lossy-incast", "planes-pfc"):
            # both planes carry data and the receivers' control packets (reply_nic's rotation)
            for col in ("tx_data_bytes", "tx_control_bytes"):
                per_plane = up.groupby(up["dst_name"].str.split(".").str[0])[col].sum()
                assert len(per_plane) >= 2 and (per_plane > 0).all(), (col, per_plane)
        if case in ("planes-lossy-incast", "planes-gbn", "planes-rto-adaptive"):
            assert run["dropped_packets"] > 0 and run["retransmission_timeouts"] > 0
        if case == "planes-pfc":
            assert L["pfc_pause_events"].sum() > 0 and run["dropped_packets"] == 0
        if case == "planes-failed-plane":
            assert (a.links.groupby("src")["kind"].count()[:16] < 4).sum() == 2       # two GPUs lost a port
        if case == "planes-nvlink-as-roce":
            assert L.loc[L["kind"] == "nvlink", "tx_data_bytes"].sum() > 0 and up["tx_data_bytes"].sum() > 0
    if case.startswith("nvlink-"):
        L = a.links
        nv = L[L["kind"] == "nvlink"]
        assert nv["tx_data_bytes"].sum() > 0 and nv["tx_control_bytes"].sum() == 0 and nv["drops_buffer_full"].sum() == 0
        if case.startswith("nvlink-racks") or case == "nvlink-hgx-nodes-all-to-all":
            hl = L[L["kind"] == "host-leaf"]
            assert hl["tx_data_bytes"].sum() > 0 and hl["tx_control_bytes"].sum() > 0       # RoCE across domains
        if case == "nvlink-racks-pfc":
            assert L["pfc_pause_events"].sum() > 0
        if case == "nvlink-racks-lossy-rto-adaptive":
            assert run["dropped_packets"] > 0 and run["timeout_probes"] > 0
        if case == "nvlink-time-limit-cut":
            assert a.summary["status"] == "time_limit" and run["in_network_payload_bytes"] > 0
        if case == "nvlink-sampling-on":
            assert len(a.link_timeseries)
    if case.startswith("pxn-"):
        L = a.links
        hl = L[(L["kind"] == "host-leaf") & L["dst_name"].str.startswith("p")]
        assert L.loc[L["kind"] == "nvlink", "tx_data_bytes"].sum() > 0 and hl["tx_data_bytes"].sum() > 0
        if case == "pxn-incast-retry-limit":
            assert a.summary["status"] == "incomplete_failed" and run["dropped_packets"] > 0
        else:
            assert a.summary["status"] == "complete"
            b_ = a.summary["bytes"]
            assert b_["delivered_payload_bytes"] == a.goodput["delivered_bytes"].sum()     # relay hops not goodput
        if case == "pxn-incast-rto-adaptive":
            assert run["dropped_packets"] > 0 and run["timeout_probes"] > 0
    if case.startswith("gbn-"):
        m = a.messages
        assert a.summary["status"] == ("incomplete_failed" if case == "gbn-retry-limit" else "complete")
        assert m["naks"].sum() > 0 and m["discarded_out_of_order_bytes"].sum() > 0
        if case != "gbn-retry-limit":                 # (there the timeouts' rewinds come first)
            assert m["rtx_nak_bytes"].sum() > 0
        assert m["rtx_sack_bytes"].sum() == 0 and run["timeout_probes"] == 0       # no selective recovery
        if case == "gbn-spray-reordering":
            assert run["dropped_packets"] == 0 and run["stale_naks_ignored"] > 0   # reordering alone
        else:
            assert run["retransmission_timeouts"] > 0 and m["rtx_timeout_bytes"].sum() > 0
        if case in ("gbn-rto-adaptive-spray", "gbn-retry-limit"):
            assert run["dsacks_received"] > 0


@pytest.mark.parametrize("seed", [3, 4, 9, 12, 17, 20])
def test_random_scenarios_inside_the_slice_are_identical(seed):
    """A few of benchmarks/check_compiled.py's random scenarios (it runs hundreds)."""
    from conftest import load_bench
    chk = load_bench("check_compiled")
    assert chk.compare(chk.scenario(seed)) == []



def _a2a_tight(**receiver):
    """A sprayed all-to-all over three leaves on 100G spine links with 256 KiB buffers: deep spine
    queues reorder units by microseconds, so with a 100 ns reorder window a unit often arrives
    after an ACK reported one sent well after it."""
    sc = _all_to_all(**receiver)
    sc["topology"] = {**FABRIC, "leaves": 3, "buffer": {"mode": "per_port", "size": "256KiB"},
                      "fabric_link": {"rate": "100Gbps", "delay": "500ns"}}
    return sc


#: ACK coalescing (receiver.ack_every > 1) with each compiled receiver and timer mode, and the
#: branches each case must reach in the heap run (counted by _Reach): the delayed-ACK timer firing,
#: re-armed lazily (a unit arrived since it was set) and stale (an ACK went out since); ACKs whose
#: SACK bitmap reports held units, held units beyond the bitmap's reach; RACK within the reach
#: (_rack_scan) and skipping units beyond it; a late unit acknowledged by name (per-unit format);
#: the adaptive timeout's wait allowance; a probe of the earliest unit within reach (not the
#: lowest unacknowledged PSN); the go-back-N receiver's NAKs
COALESCING = {
    "ddp-8-fixed-ecmp": (lambda tmp: _lossy_incast(receiver={"ack_every": 8}),
                         {"timer_fired", "timer_rearmed", "timer_stale", "bitmap"}),
    "ddp-8-adaptive-spray": (lambda tmp: _lossy_incast(routing={"policy": "spray"},
                                                       receiver={"ack_every": 8, "rto_mode": "adaptive"}),
                             {"timer_fired", "bitmap", "rack_scan", "wait", "dsack_sent"}),
    "ddp-8-sack8-adaptive-spray": (lambda tmp: _lossy_incast(
        routing={"policy": "spray"}, receiver={"ack_every": 8, "sack_bitmap": 8, "rto_mode": "adaptive"}),
        {"bitmap", "beyond_reach", "rack_scan", "rack_skips_beyond_reach"}),
    "ddp-4-sack8-busy-nics": (lambda tmp: _all_to_all(ack_every=4, sack_bitmap=8, rto_min="1us", retry_limit=50),
                              {"probe_in_reach", "bitmap", "wait", "dsack_sent"}),
    "ddp-4-fixed-late-units-by-name": (lambda tmp: _a2a_tight(ack_every=4, reorder_window="100ns", rto_mode="fixed"),
                                       {"by_name", "rack_scan", "timer_fired", "timer_rearmed"}),
    "ddp-8-time-limit-cut": (lambda tmp: _lossy_incast(receiver={"ack_every": 8}, simulation={"time_limit": "9us"}),
                             {"timer_fired"}),
    "gbn-64-fixed-ecmp": (lambda tmp: _lossy_incast(receiver={"model": "go_back_n", "ack_every": 64}),
                          {"timer_fired", "timer_rearmed", "nak"}),
    "gbn-64-adaptive-spray": (lambda tmp: _lossy_incast(routing={"policy": "spray"},
                                                        receiver={"model": "go_back_n", "ack_every": 64,
                                                                  "rto_mode": "adaptive"}),
                              {"timer_fired", "nak", "wait", "dsack_sent"}),
    "gbn-8-adaptive-late-units": (lambda tmp: _a2a_tight(model="go_back_n", ack_every=8, reorder_window="100ns"),
                                  {"timer_fired", "timer_stale", "nak", "wait", "dsack_sent"}),
    # the ethernet profile's transport (go-back-N, ack_every 64, fixed timers, PFC, ECMP) without its
    # DCQCN (congestion control is a later slice): an incast that pauses
    "ethernet-profile-cc-none": (lambda tmp: {**_pfc_incast(), "profile": "ethernet",
                                              "congestion_control": {"algorithm": "none"}, "receiver": {}},
                                 {"timer_fired", "timer_rearmed"}),
}


class _Reach:
    """Counts, in a heap run, the ACK-coalescing branches a case reaches (wrapping the Python
    models' methods with monkeypatch; the compiled run is not touched)."""

    def __init__(self, monkeypatch):
        from collections import Counter

        from fabricsim.net.packet import ACK, NAK
        from fabricsim.net.sender import Sender
        from fabricsim.receiver.base import Receiver
        self.n = n = Counter()
        timer, ack, send_now = Receiver._on_ack_timer, Receiver.ack, Receiver.send_now
        scan, probe, rto = Sender._rack_scan, Sender._probe, Sender.rto

        def on_timer(rcv, t, arg):
            qp, token = arg
            n["timer_stale" if qp.r_acks != token or not qp.r_unacked else
              "timer_rearmed" if t < qp.r_last_rx + rcv.ack_delay else "timer_fired"] += 1
            return timer(rcv, t, arg)

        def on_ack(rcv, t, qp, dup):
            if qp.r_set:
                n["bitmap"] += 1
                n["beyond_reach"] += any(p >= qp.r_cum + rcv.sack_units for p in qp.r_set)
            n["dsack_sent"] += dup is not None
            return ack(rcv, t, qp, dup)

        def on_send_now(rcv, t, qp, kind, seq, trigger):
            n["by_name" if kind == ACK else "nak" if kind == NAK else "other"] += 1
            return send_now(rcv, t, qp, kind, seq, trigger)

        def on_scan(snd, qp, limit):
            n["rack_scan"] += 1
            reach = qp.una + snd.sack_reach
            n["rack_skips_beyond_reach"] += any(ts < limit and psn >= reach for psn, ts in qp.outstanding)
            return scan(snd, qp, limit)

        def on_probe(snd, qp):
            n["probe_in_reach"] += qp.una in qp.lost or qp.una >= qp.high
            return probe(snd, qp)

        def on_rto(snd, qp):
            n["wait"] += bool(snd.ack_wait_bytes and snd.adaptive and qp.high < qp.npsn)
            return rto(snd, qp)

        for cls, name, fn in ((Receiver, "_on_ack_timer", on_timer), (Receiver, "ack", on_ack),
                              (Receiver, "send_now", on_send_now), (Sender, "_rack_scan", on_scan),
                              (Sender, "_probe", on_probe), (Sender, "rto", on_rto)):
            monkeypatch.setattr(cls, name, fn)


@pytest.mark.parametrize("case", list(COALESCING))
def test_ack_coalescing_compiled_gives_the_heap_kernels_tables(case, tmp_path, monkeypatch):
    make, reaches = COALESCING[case]
    sc = make(tmp_path)
    with monkeypatch.context() as m:
        reach = _Reach(m)
        a = _run(sc, "heap")
    b = _run(sc, "compiled")
    assert b.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    assert _comparable(a.summary) == _comparable(b.summary)
    assert a.summary["run"]["events"] == b.summary["run"]["events"]       # the same agenda entries
    for table in ("latency", "goodput", "link_timeseries", "nics"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    missed = {k for k in reaches if not reach.n[k]}
    assert not missed, (missed, dict(reach.n))
    if case == "ddp-8-time-limit-cut":
        assert a.summary["status"] == "time_limit" and a.summary["conservation"]["control"]["in_flight_packets"] > 0
    else:
        assert a.summary["status"] == "complete"


def test_coalesced_acks_in_flight_are_written_back_with_their_bitmaps():
    """A run cut while coalesced ACKs are in flight: the packets the compiled run puts back on the
    ports (``PacketEngine.in_flight``) carry the SACK bitmaps, D-SACKs and send times heap's do."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.packet import PacketEngine

    sc = _lossy_incast(routing={"policy": "spray"}, topology={**FABRIC, "buffer": {"mode": "per_port", "size": "16KiB"}},
                       traffic={"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "1MiB"},
                       receiver={"ack_every": 4, "sack_bitmap": 200, "rto_mode": "adaptive"},
                       simulation={"time_limit": "14us"})
    seen = {}
    for kernel in ("heap", "compiled"):
        _, sim = prepare({**sc, "simulation": {**sc["simulation"], "kernel": kernel}})
        eng = PacketEngine(sim, Recorder())
        eng.run()
        assert eng.kernel_info["ran"] == kernel
        seen[kernel] = sorted((p.qp.uid, p.kind, p.seq, p.wire, p.t_tx, p.sacks, p.dsack, p.sack, p.t_data, p.ce)
                              for p in eng.in_flight() if p.kind)
    assert seen["heap"] == seen["compiled"]
    assert any(p[5] for p in seen["heap"])                       # bitmaps reporting held units
    assert any(p[5] is not None and p[5] >> 64 for p in seen["heap"])   # beyond the first word


def test_the_compiled_ack_request_is_the_receivers_own():
    """ACK coalescing's AckReq test compiled from receiver/base.py equals the Python function."""
    from fabricsim.engine.compiled import core
    from fabricsim.receiver.base import ack_requested

    rng = random.Random(5)
    for _ in range(20000):
        ae = rng.choice([2, 3, 8, 64, 1024, rng.randrange(2, 1025)])
        npsn = rng.randrange(1, 5000)
        seq = rng.randrange(npsn)
        end = seq + rng.choice([1, 1, 2, 4])
        cum = rng.choice([seq, end, rng.randrange(npsn + 1)])
        assert bool(core.ack_requested(seq, end, cum, npsn, ae)) == ack_requested(seq, end, cum, npsn, ae)


def test_coalescing_timers_beyond_int64_fall_back():
    """The delayed-ACK timer is set at ``t + ack_delay``, and the adaptive timeout adds ACK
    coalescing's allowance (``ack_delay`` plus ``ack_every`` units at the line rate) to its base,
    in int64: a time limit plus ``ack_delay`` of 2^62 ps or more, or an allowance of 2^61 ps or more
    with adaptive timeouts, goes to heap and says why."""
    b = _run(_lossy_incast(receiver={"ack_every": 8, "ack_delay": "4700000s"}), "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "receiver.ack_delay of 2^62 ps" in info["fallback"], info
    b = _run(_lossy_incast(receiver={"ack_every": 8, "ack_delay": "2400000s", "rto_mode": "adaptive"}), "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "receiver.ack_delay plus ack_every units" in info["fallback"], info
    ok = _run(_lossy_incast(receiver={"ack_every": 8, "ack_delay": "1ms", "rto_mode": "adaptive"}), "compiled")
    assert ok.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}

def test_pools_that_start_small_grow_without_losing_state(monkeypatch):
    """Every pool starts at a few entries (list nodes: 64) and must grow between events: an RTO of
    a queue pair with many units outstanding moves them all to its retransmission list in one
    event (review finding: it used to take a node per unit before freeing any)."""
    from fabricsim.engine.compiled import core, state
    build = state.build

    def tiny(engine, nic_index):
        X = build(engine, nic_index)
        X = X._replace(D=state._arr("D", 64))
        state._link_free(X.D[:, core.D_NEXT], 0)
        X.g[core.G_DFREE], X.g[core.G_DNFREE] = 0, 64
        return X

    monkeypatch.setattr(state, "build", tiny)
    sc = _lossy_incast(topology={**FABRIC, "buffer": {"size": "unbounded"}},
                       traffic={"pattern": "incast", "senders": 7, "receiver": 0, "message_size": "512KiB",
                                "qps_per_message": 2},
                       routing={"policy": "spray"}, receiver={"rto_low": "500ns", "rto_high": "500ns",
                                                                  "retry_limit": 20},
                       simulation={"time_limit": "400us"})
    a = _run(sc, "heap")
    b = _run(sc, "compiled")
    assert a.summary["run"]["retransmission_timeouts"] > 100
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)



def test_sack_bitmaps_pool_that_starts_small_grows_without_losing_state(monkeypatch):
    """The pool of SACK bitmaps (one per coalesced ACK in flight that reports held units) starts
    at 20 and must grow between events, the bitmaps in flight kept (their rows are copied and the
    new rows join the free list)."""
    from fabricsim.engine.compiled import core, state
    build, grow = state.build, state.grow
    grown = []

    def tiny(engine, nic_index):
        X = build(engine, nic_index)
        X = X._replace(BM=state._arr("BM", 20, X.BM.shape[1]))
        state._link_free(X.BM[:, 0], 0)
        X.g[core.G_BFREE], X.g[core.G_BNFREE] = 0, 20
        return X

    def counted(X, group, need):
        grown.append(group)
        return grow(X, group, need)

    monkeypatch.setattr(state, "build", tiny)
    monkeypatch.setattr(state, "grow", counted)
    sc = _a2a_tight(ack_every=4, sack_bitmap=100, reorder_window="100ns")
    a = _run(sc, "heap")
    b = _run(sc, "compiled")
    assert grown.count("bm") >= 2
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    assert _comparable(a.summary) == _comparable(b.summary)

def test_serialisation_and_backlog_of_any_rate_equal_the_ports_big_int_arithmetic():
    """``_ser`` and ``_backlog_bytes`` (int64, over PS_BITS / rate reduced) against ``Port.ser_ps``
    and ``d * rate // PS_BITS`` in Python's big ints, for rates that divide 8e12 and rates that do
    not, at backlogs up to 2^62 ps and packets up to 1 MB; and a lossless queue's ``_ser_big`` and
    ``_drain_ps`` against ``Port.ser_ps`` and ``b * PS_BITS // rate`` for queues up to a 2^62 ps drain."""
    from collections import namedtuple

    from fabricsim.engine.compiled import core
    from fabricsim.engine.compiled.coverage import _fraction_too_fine, rate_fraction
    from fabricsim.net.port import PS_BITS, Port

    rates = [400_000_000_000, 100_000_000_000, 300_000_000_000, 333_000_000_000, 1_600_000_000_000,
             7_000_000, 123_456_789_000, 999_999_000_000, 3]
    assert not any(_fraction_too_fine(r) for r in rates)
    assert _fraction_too_fine(8_000_000_000_001)     # coprime with 8e12: rn * rd is about 2^85
    ports = [Port(i, 0, 1, "fabric", r, 0, 0, None) for i, r in enumerate(rates)]
    P = np.zeros((len(rates), len(core.PORT_FIELDS)), dtype=np.int64)
    col = {f: i for i, f in enumerate(core.PORT_FIELDS)}
    for p in ports:
        P[p.index, col["rn"]], P[p.index, col["rd"]] = rate_fraction(p.rate)
        assert (P[p.index, col["rn"]] == 1) == bool(p.ps_per_byte)          # rn == 1: whole ps per byte
        assert not p.ps_per_byte or P[p.index, col["rd"]] == p.ps_per_byte
    X = namedtuple("X", "P")(P)                     # the two functions read X.P only
    rng = np.random.default_rng(7)
    wires = [1, 82, 4178, 9082, 65_536, 1_000_000] + rng.integers(1, 1 << 20, 40).tolist()
    backlogs = [1, 19, 20, 21, 79, 80, 81, 10**9, 2**40 + 3, 2**62] + rng.integers(1, 1 << 62, 40).tolist()
    for p in ports:
        for w in wires:
            assert core._ser(X, p.index, w) == p.ser_ps(w), (p.rate, w)
        for d in backlogs:
            assert core._backlog_bytes(X, p.index, d) == d * p.rate // PS_BITS, (p.rate, d)
        # a lossless queue of b bytes (PFC: LosslessPort's peak and Pfc._apply_resume's busy_until),
        # up to queues whose drain time reaches 2^62 ps
        top = (2**62) * p.rate // PS_BITS
        sizes = [0, 1, 2, 3, 79, 80, 81, 1_152_921, 1_152_922, 10**9, top] + rng.integers(0, top + 1, 40).tolist()
        for b in (b for b in sizes if b <= top):
            assert core._ser_big(X, p.index, b) == p.ser_ps(b), (p.rate, b)
            assert core._drain_ps(X, p.index, b) == b * PS_BITS // p.rate, (p.rate, b)


def test_outside_the_slice_the_run_says_why_and_runs_on_heap():
    sc = _small(simulation={"time_limit": "1000000s"}, receiver={"model": "reorder_buffer", "buffer": 2**62},
                outputs={"link_sample_interval": "off"})
    b = _run(sc, "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and b.summary["kernel"] == "heap"
    assert "simulation.time_limit x the units" in info["fallback"] and "receiver.buffer of 2^62 bytes" in info["fallback"]
    assert info["fallback"] in b.summary["warnings"]
    a = _run(sc, "heap")
    pd.testing.assert_frame_equal(a.messages, b.messages)


def test_the_compiled_arithmetic_is_the_models_own():
    """ECMP's pick, the packet draw (CPython's tuple hash, written out for a core compiled without
    reference counting) and RED's comparison, compiled from the models' source, equal the Python
    functions on random and edge-case inputs."""
    from numba import njit

    from fabricsim.engine.compiled import core

    @njit(_nrt=False)
    def pick(h, salt, sw, n, c):
        return core.ecmp_pick(h, salt, np.uint64(sw), np.uint64(n), c)

    @njit(_nrt=False)
    def draw(salt, a, b, c, d, e):
        return core.packet_draw_fields(salt, a, b, c, d, e)

    @njit(_nrt=False)
    def red(d, q, kmin, kmax, pmax):
        return core.red_below(d, q, kmin, kmax, pmax)

    @njit(_nrt=False)
    def bucket(d, inv):
        return int(math.log(d) * inv)               # = Receiver.on_packet's latency bucket

    rng = random.Random(7)
    edges = [0, 1, 2**61 - 2, 2**61 - 1, 2**61, 2**63 - 1, 2**63, 2**64 - 1]
    for i in range(4000):
        salt = edges[i] if i < len(edges) else rng.getrandbits(64)
        h = edges[-1 - i] if i < len(edges) else rng.getrandbits(64)
        sw, n, c = rng.randrange(5000), rng.randrange(1, 130), bool(i & 1)
        assert int(pick(np.uint64(h), np.uint64(salt), sw, n, c)) == ecmp.ecmp_index(h, salt, sw, n, c)
        f = (rng.choice([0, 5, 2**61 - 1, 2**61, rng.randrange(1 << 40)]), rng.randrange(1 << 30),
             rng.randrange(1 << 50), rng.randrange(4), rng.randrange(5000))
        assert int(draw(np.uint64(salt), *f)) == identity.packet_draw_fields(salt, *f)
        kmin = rng.randrange(0, 200_000)
        kmax = kmin + 1 + rng.randrange(2_000_000)
        q = rng.randrange(kmin + 1, kmax + 1)
        d = rng.getrandbits(64)
        assert bool(red(np.uint64(d), q, kmin, kmax, 0.2)) == switch_mod.red_below(d, q, kmin, kmax, 0.2)
        inv = 1.0 / math.log1p(0.01)
        lat = rng.choice([1, 2, 83_560, rng.randrange(1, 10**12)])
        assert bucket(lat, inv) == int(math.log(lat) * inv)


def test_the_compiled_timeout_arithmetic_is_the_senders_own():
    """The adaptive timeout, the jitter draw and the RTT estimator compiled from net/sender.py equal
    the Python functions, and the timeout equals its definition in Python's big integers
    (``min(rto_max, (B << k) + ((B << k) * jitter * u >> 40))``) up to the bounds coverage.py sets:
    ``(rto_max - 1) * jitter < 2^63`` and ``rto_max < 2^62`` (back-offs of 2^30 and draws near 2^24
    included)."""
    from numba import njit

    from fabricsim.engine.compiled import core
    from fabricsim.net import sender

    @njit(_nrt=False)
    def draw(salt, uid, n):
        return core.rto_draw(salt, np.uint64(uid), np.uint64(n))

    def spec(rto_min, idle, srtt, rttvar, mult, wait, k, jit, u, rto_max):
        base = max(rto_min, 2 * idle) if not srtt else (max(rto_min, srtt + mult * rttvar) if mult else rto_min)
        r = (base + wait) << min(k, 30)
        return min(rto_max, r + (r * jit * u >> 40))

    rng = random.Random(11)
    for i in range(20000):
        jit = rng.choice([0, 1, 32768, 4 * 65536, rng.randrange(4 * 65536 + 1)])
        # the largest rto_max coverage.py lets through: (rto_max - 1) * jit < 2^63, rto_max < 2^62
        top = min((2**63 - 1) // jit + 1, 2**62 - 1) if jit else 2**62 - 1
        rto_max = rng.choice([top, rng.randrange(1, top + 1), 10**9, 50_000_000])
        rto_min = rng.choice([1, rto_max, rng.randrange(1, rto_max + 1)])
        args = (rto_min, rng.randrange(10**8), rng.choice([0, rng.randrange(1, 10**10)]), rng.randrange(10**9),
                rng.choice([0, 4, 64]), rng.choice([0, rng.randrange(10**6)]), rng.choice([0, 1, 29, 30, 31, 1000,
                                                                                           rng.randrange(40)]),
                jit, rng.choice([0, (1 << 24) - 1, rng.randrange(1 << 24)]), rto_max)
        want = sender.adaptive_rto_ps(*args)
        assert core.adaptive_rto_ps(*args) == want == spec(*args), args
        salt, uid, n = rng.getrandbits(64), rng.randrange(1 << 40), rng.randrange(1, 10**6)
        assert int(draw(np.uint64(salt), uid, n)) == sender.rto_draw(salt, uid, n)
        srtt, rttvar, r = rng.choice([0, rng.randrange(1, 10**9)]), rng.randrange(10**9), rng.randrange(1, 10**9)
        assert tuple(core.rtt_estimate(srtt, rttvar, r)) == sender.rtt_estimate(srtt, rttvar, r)
        a, u = rng.randrange(1 << 63), rng.randrange(1 << 24)
        assert core._mul_shr(a, u, 40) == sender.mul_shr(a, u, 40) == (a * u) >> 40


def test_adaptive_timeouts_beyond_int64_fall_back():
    """``rto_max x rto_jitter x 65536`` of 2^63 ps or more (40 s at jitter 4) would overflow the
    compiled timeout's int64 product: that run goes to heap and says why; 30 s runs compiled."""
    b = _run(_lossy_incast(receiver={"rto_mode": "adaptive", "rto_max": "40s", "rto_jitter": 4}), "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "receiver.rto_max x rto_jitter" in info["fallback"], info
    ok = _run(_lossy_incast(receiver={"rto_mode": "adaptive", "rto_max": "30s", "rto_jitter": 4}), "compiled")
    assert ok.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}


def test_time_spans_beyond_int64_fall_back():
    """A timer is set at ``t + timeout`` with ``t`` up to the time limit, and a message's reorder
    waits are summed, in int64: a time limit plus the longest timeout of 2^62 ps or more (fixed or
    adaptive), or a time limit times the largest message's units of 2^62 or more, goes to heap and
    says why (these runs diverged when compiled); a limit just below runs compiled."""
    adaptive = {"rto_mode": "adaptive", "rto_min": "4000000s", "rto_max": "4000000s", "rto_jitter": 0}
    long_bins = {"timeseries_bin": "100000s"}        # (goodput bins over days of simulated time)
    for receiver, limit in ((adaptive, "9000000s"), ({"rto_low": "4000000s", "rto_high": "4000000s"}, "9000000s")):
        b = _run(_lossy_incast(receiver=receiver, simulation={"time_limit": limit}, outputs=long_bins), "compiled")
        info = b.summary["run"]["kernel"]
        assert info["ran"] == "heap" and "time_limit plus the longest retransmission timeout" in info["fallback"], info
    big = _run(_lossy_incast(receiver={**adaptive, "rto_min": "1ms", "rto_max": "1ms"},
                             simulation={"time_limit": "2300000s"}, outputs=long_bins), "compiled")
    info = big.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "units of the largest message" in info["fallback"], info
    ok = _run(_lossy_incast(simulation={"time_limit": "10s"}), "compiled")
    assert ok.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}


def test_pfc_drain_times_beyond_int64_fall_back():
    """A lossless queue's drain time is formed in int64 and is at most the time limit times the
    fabric's total port rate over the port's: a run where that reaches 2^61 ps goes to heap and
    says why; a long limit below it runs compiled."""
    sc = _pfc_incast(topology={**FABRIC, "host_link": {"rate": "1Gbps", "delay": "500ns"}},
                     simulation={"time_limit": "1000000s"}, outputs={"timeseries_bin": "100s"})
    b = _run(sc, "compiled")
    info = b.summary["run"]["kernel"]
    assert info["ran"] == "heap" and "switch.pfc with simulation.time_limit x" in info["fallback"], info
    ok = _run(_pfc_incast(simulation={"time_limit": "10s"}), "compiled")
    assert ok.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}


def test_a_changed_shared_function_discards_the_cached_core(tmp_path):
    """numba keys the core's disk cache on core.py alone; the shared model functions compiled into
    it are stamped beside the cache, and a different stamp discards it."""
    from fabricsim.engine.compiled import core
    (tmp_path / "core.run-1.py311.nbi").write_text("x")
    (tmp_path / "core.run-1.py311.1.nbc").write_text("x")
    (tmp_path / "other.f-1.py311.nbi").write_text("x")
    (tmp_path / "core.shared").write_text("a stamp of other sources")
    assert core.check_cache(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["core.shared", "other.f-1.py311.nbi"]
    assert (tmp_path / "core.shared").read_text() == core.shared_stamp()
    (tmp_path / "core.run-1.py311.nbi").write_text("x")
    assert not core.check_cache(tmp_path) and (tmp_path / "core.run-1.py311.nbi").exists()


def _same_results(a, b):
    """``b`` (a compiled run) ran compiled and equals ``a`` (heap's): every table, the summary and the
    event count."""
    assert b.summary["run"]["kernel"] == {"requested": "compiled", "ran": "compiled"}, b.summary["run"]["kernel"]
    for table in ("messages", "links", "latency", "goodput", "link_timeseries", "nics"):
        pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
    assert _comparable(a.summary) == _comparable(b.summary)
    assert a.summary["run"]["events"] == b.summary["run"]["events"]


def _collect_engines(monkeypatch, engines):
    """Append every :class:`PacketEngine` run from now on to ``engines`` (for :func:`_both_kernels`)."""
    from fabricsim.engine.packet import PacketEngine
    orig_run = PacketEngine.run

    def run(self, *a, **k):
        engines.append(self)
        return orig_run(self, *a, **k)
    monkeypatch.setattr(PacketEngine, "run", run)


def _both_kernels(sc, counts, engines, *states):
    """Run ``sc`` on ``heap`` then ``compiled`` and compare everything: every table, the summary, the
    event count and each of ``states`` (a function of a built engine) on the two engines; ``counts``
    (a dict the test's wrappers fill) is cleared first and ``engines`` collects the built engines
    (the last two are this pair). Returns the heap run's result, its engine and what it counted."""
    counts.clear()
    a = fabricsim.run(sc, overrides=["simulation.kernel=heap"])
    seen = dict(counts)
    b = fabricsim.run(sc, overrides=["simulation.kernel=compiled"])
    ea, eb = engines[-2:]
    _same_results(a, b)
    for state in states:
        assert state(ea) == state(eb), state.__name__
    return a, ea, seen


def _engine(sc, kernel):
    """Build and run the packet engine itself (its ports and NICs are read afterwards)."""
    from fabricsim.analysis.recorder import Recorder
    from fabricsim.api import prepare
    from fabricsim.engine.interface import ENGINES
    _loaded, sim = prepare({**sc, "simulation": {**sc.get("simulation", {}), "kernel": kernel}})
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    return eng, eng.run()


def _nvlink_state(eng):
    """Every NVLink port's credit state and every NIC's attempts, as plain values."""
    from fabricsim.net.nvlink import NvlinkNic, NvlinkPort
    ports = [(p.index, p.credit_bytes, p.held_bytes, sorted(p.cr_heap), list(p.cr_q), list(p.sched), p.sched_bytes,
              p.cr_wait, p.buffer_peak_bytes, p.credit_stalls, p.busy_until, p.tx_bytes)
             for p in eng.ports if isinstance(p, NvlinkPort)]
    nics = [(h, n.tx_calls, n.tx_sent, n.busy, n.token, n.pending_at,
             sorted((q.uid, v) for q, v in n.stripe.items() if v) if isinstance(n, NvlinkNic) and n.stripe is not None
             else None)
            for h, ns in eng.nics.items() for n in ns]
    return ports, nics


@pytest.mark.parametrize("spread", ["stripe", "adaptive"])
@pytest.mark.parametrize("limit", ["20ms", "3us"])
def test_nvlink_credit_state_is_written_back_as_heap_leaves_it(spread, limit):
    """After a compiled run the engine's NVLink objects hold what heap leaves: each GPU link's
    credit, its returns on their way back (``cr_heap``), the buffer peak, the credit stalls and
    ``cr_wait``; each chip port's returns due from its GPU (``cr_q``) and the units it holds
    (``sched``, less those a link sample or the final snapshot saw out); each link's stripe
    counts, attempts and units sent. In a run that completes and in one cut with units in flight,
    with credit tight enough to stall the senders."""
    sc = {"name": "cc_nv_state", "topology": {"kind": "cluster", "domain": "hgx8", "nodes": 2,
                                               "nic": {"ports": 2, "rate": "400Gbps"},
                                               "nvlink": {"spread": spread, "credit_buffer": "16KiB"}},
          "traffic": {"pattern": "all_to_all", "message_size": "64KiB"}, "routing": {"policy": "spray"},
          "simulation": {"seed": 1, "time_limit": limit}}
    a, oa = _engine(sc, "heap")
    b, ob = _engine(sc, "compiled")
    assert b.kernel_info == {"requested": "compiled", "ran": "compiled"}
    assert oa.status == ob.status == ("complete" if limit == "20ms" else "time_limit")
    pa, na = _nvlink_state(a)
    pb, nb = _nvlink_state(b)
    assert pa == pb and na == nb
    assert sum(p[9] for p in pa) > 0                       # credit stalls
    if limit == "3us":
        assert any(p[3] for p in pa) and any(p[4] for p in pa)      # credits on their way back


def test_the_compiled_nvlink_arithmetic_is_the_models_own():
    """NVLink's framing and striping compiled from net/nvlink.py equal the Python functions (the
    stripe's ``(pos - uid) % links`` floors for uids far above the link count)."""
    from numba import njit

    from fabricsim.engine.compiled import core
    from fabricsim.net import nvlink

    @njit(_nrt=False)
    def both(payload, pp, ph, pos, uid, links, sent):
        return core.nvlink_wire_bytes(payload, pp, ph), core.nvlink_stripe_psn(pos, uid, links, sent)

    rng = random.Random(5)
    for _ in range(20000):
        pp = rng.choice([64, 128, 256, rng.randrange(1, 4097)])
        payload, ph = rng.randrange(1, 1 << 22), rng.randrange(0, 4 * pp)
        links = rng.randrange(1, 73)
        pos, uid, sent = rng.randrange(links), rng.choice([0, links, rng.randrange(1 << 40)]), rng.randrange(1 << 20)
        assert tuple(both(payload, pp, ph, pos, uid, links, sent)) == (
            nvlink.nvlink_wire_bytes(payload, pp, ph), nvlink.nvlink_stripe_psn(pos, uid, links, sent))


def test_bench_cluster_compiled_runs_and_checks_both_kernels(tmp_path):
    """benchmarks/bench_cluster_compiled.py (the smallest case, both kernels) so that it does not
    rot: its runs must agree and the compiled one must have run compiled; every case's scenario
    validates."""
    import json

    from conftest import load_bench
    from fabricsim.api import prepare
    mod = load_bench("bench_cluster_compiled")
    for case in mod.CASES:
        if not case.startswith("nvl72x2_moe"):        # (its trace is generated by the run)
            prepare(mod.scenario(case, str(tmp_path)))
    out = tmp_path / "c.json"
    assert mod.main(["--cases", "planes_32_a2a", "--out", str(out)]) == 0
    row = json.loads(out.read_text())["cases"][0]
    assert row["identical"] and {r["kernel"]: r["ran"] for r in row["runs"]} == {"heap": "heap", "compiled": "compiled"}


#: what write_back puts back on each queue pair, its flow and its message (state.py), compared by value
#: and type: the tables read only part of it (a queue pair's PSNs and timers, a message's ACK and
#: control counters none)
_QP_BACK = ("uid", "seq", "una", "high", "out_bytes", "sent_done", "timeouts", "rto_armed", "rto_at", "r_cum", "r_max",
            "r_hold", "r_acks", "reo", "rack_t", "srtt", "rttvar", "reo_t", "rto_draws", "rto_u", "goback_t",
            "gb_cause", "r_nak", "r_unacked", "r_ce", "r_tack", "r_tsent", "r_last_rx", "r_tel", "r_last_cnp",
            "next_ok")
_FLOW_BACK = ("rate_bps", "window_bytes", "sent_bytes", "acked_bytes", "active")
_MSG_BACK = ("delivered", "dropped", "injected", "dup_bytes", "rx_units", "ooo_units", "peak_hold", "reorder_wait_ps",
             "reorder_wait_max_ps", "ecn_marked", "acks", "ctrl_arrived", "ctrl_dropped", "naks", "naks_sent",
             "discarded_bytes", "cnps", "cnps_sent", "overflow_bytes")


def _typed(v):
    return type(v).__name__, v


def _written_back(eng):
    """Every message's (and PXN piece's) counters and each of its queue pairs' and flows' state, as
    (type, value) pairs (dicts as their items, in order)."""
    out = []
    for st in list(eng._rows) + list(eng.pieces):
        qps = []
        for qp in st.qps:
            f, s = qp.flow, qp.flow.state
            cc = [] if s is None else [(k, _typed(getattr(s, k, None))) for k in type(s).__slots__
                                       if k not in ("ports", "last_hops")]
            if s is not None and hasattr(s, "ports"):
                cc.append(sorted((k, list(h.rate), list(h.qmin), h.last_ts, h.last_q) for k, h in s.ports.items()))
            qps.append(([_typed(getattr(qp, k)) for k in _QP_BACK], qp.heir.uid if qp.heir else None,
                        [_typed(getattr(f, k)) for k in _FLOW_BACK], cc))
        out.append(([_typed(getattr(st, k)) for k in _MSG_BACK], list(st.rtx_bytes.items()),
                    list(st.reorder_hist.items()), qps))
    return out


WRITE_BACK = {
    "lossy-fixed": _lossy_incast(),
    "lossy-cut": _lossy_incast(simulation={"time_limit": "30us"}),
    "gbn-adaptive-cut": _lossy_incast(receiver={"model": "go_back_n", "rto_mode": "adaptive", "rto_min": "5us"},
                                      simulation={"time_limit": "60us"}),
    "dcqcn": _lossy_incast(congestion_control={"algorithm": "dcqcn", "cnp_interval": "4us", "alpha_timer": "10us",
                                               "rate_increase_timer": "5us", "byte_counter": "64KB"}),
    "dcqcn_cx-cut": _lossy_incast(congestion_control={"algorithm": "dcqcn_cx", "min_time_between_cnps": "4us"},
                                  simulation={"time_limit": "40us"}),
    "telemetry-coalesced-cut": _small(congestion_control={"algorithm": "telemetry"}, receiver={"ack_every": 4},
                                      simulation={"time_limit": "15us"}),
}


@pytest.mark.parametrize("case", list(WRITE_BACK))
def test_the_end_of_a_compiled_run_leaves_every_queue_pair_and_message_as_heap_does(case):
    """write_back reads the queue pairs' and messages' rows at once (state.py): each queue pair,
    its flow and congestion-control state and each message's counters must be exactly heap's
    (values and types), in runs that complete and runs cut with packets in flight and timers
    armed; the compared values differ from row to row, so a row or column read off by one fails."""
    a, oa = _engine(WRITE_BACK[case], "heap")
    b, ob = _engine(WRITE_BACK[case], "compiled")
    assert b.kernel_info == {"requested": "compiled", "ran": "compiled"}
    assert oa.status == ob.status
    wa, wb = _written_back(a), _written_back(b)
    assert wa == wb
    # (the rows differ: a shifted row, or a column read for another, would show)
    assert len({repr(m[0]) for m in wa}) > 1
    qps = [q for m in wa for q in m[3]]
    varying = [k for i, k in enumerate(_QP_BACK) if k != "uid" and len({repr(q[0][i]) for q in qps}) > 1]
    assert len({repr(q[0][_QP_BACK.index("rto_at")]) for q in qps}) == len(qps) > 1 and len(varying) >= 5, varying
    if not case.endswith("-cut"):
        assert any(m[1] for m in wa)      # retransmissions
