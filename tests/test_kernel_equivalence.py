"""The equivalence suite of the packet engine's kernels: every routing policy, receiver model,
congestion-control algorithm and PFC on small scenarios, run on each kernel other than the
reference ``heap``; every output table must be identical (issue 15: a new kernel, such as a
compiled core, joins by being added to ``simulation.packet.kernel`` and passes this unchanged).

The scenarios are small (a few ms in all) but reach each model's branches: an incast that drops
(lossy, small buffers: retransmissions, reordering, every receiver), the same incast lossless with
ECN (PFC pauses, CNPs, every CC algorithm), and a cross-leaf permutation for each routing policy.
"""
from __future__ import annotations

import typing

import pandas as pd
import pytest

import fabricsim
from fabricsim.cc import CC
from fabricsim.engine.packet import PacketParams
from fabricsim.receiver import RECEIVERS
from fabricsim.routing import ROUTING

REFERENCE = "heap"
KERNELS = [k for k in typing.get_args(PacketParams.model_fields["kernel"].annotation) if k != REFERENCE]

FABRIC = {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 2,
          "host_link": {"rate": "400Gbps", "delay": "500ns"}, "fabric_link": {"rate": "400Gbps", "delay": "500ns"}}


def _incast(lossless: bool, receiver="ddp", cc="none", routing="spray", rto_mode="fixed", ack_every=1):
    rcv = {"model": receiver} if rto_mode == "fixed" else {"model": receiver, "rto_mode": rto_mode}
    if ack_every != 1:
        rcv["ack_every"] = ack_every
    return {"name": "eq_incast", "topology": {**FABRIC, "buffer": {"mode": "per_port", "size": "64KiB"}},
            "traffic": {"pattern": "incast", "senders": 6, "receiver": 0, "message_size": "128KiB"},
            "routing": {"policy": routing}, "receiver": rcv,
            "congestion_control": {"algorithm": cc},
            "switch": {"ecn": {"enabled": True, "kmin": "8KB", "kmax": "48KB"}, "pfc": {"enabled": lossless}},
            "simulation": {"seed": 3, "time_limit": "20ms"}, "outputs": {"link_sample_interval": "off"}}


def _strict(sc: dict, classes: str) -> dict:
    """``sc`` with ``switch.strict_priority: classes``."""
    return {**sc, "switch": {**sc["switch"], "strict_priority": classes}}


def _permutation(routing: str):
    return {"name": "eq_perm", "topology": FABRIC,
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB"},
            "routing": {"policy": routing}, "simulation": {"seed": 2, "time_limit": "20ms"},
            "outputs": {"link_sample_interval": "off"}}


CASES = ([pytest.param(_permutation(p), id=f"routing-{p}") for p in ROUTING.names()]
         + [pytest.param(_incast(False, receiver=r), id=f"lossy-receiver-{r}") for r in RECEIVERS.names()]
         + [pytest.param(_incast(True, cc=c, routing="ecmp"), id=f"pfc-cc-{c}") for c in CC.names()]
         + [pytest.param(_incast(True, receiver=r, routing="adaptive"), id=f"pfc-receiver-{r}")
            for r in RECEIVERS.names()]
         + [pytest.param(_incast(False, cc=c, routing="adaptive"), id=f"lossy-cc-{c}") for c in CC.names()]
         # adaptive timeouts (probes, D-SACKs) under drops, with spraying's and adaptive routing's reordering
         + [pytest.param(_incast(False, routing=p, rto_mode="adaptive"), id=f"lossy-rto-adaptive-{p}")
            for p in ("spray", "adaptive")]
         # go-back-N's rewinds with adaptive timeouts (its RTT floor, D-SACKs of resent duplicates)
         + [pytest.param(_incast(False, receiver="go_back_n", rto_mode="adaptive"), id="lossy-rto-adaptive-go_back_n")]
         # ACK coalescing (SACK bitmaps, the delayed-ACK timer) with each receiver, fixed and adaptive
         # timeouts; go-back-N with ack_every 64 lossless under ECMP is the ethernet profile's transport
         + [pytest.param(_incast(False, receiver=r, ack_every=8, rto_mode=m), id=f"lossy-ack-every-8-{r}-{m}")
            for r in RECEIVERS.names() for m in ("fixed", "adaptive")]
         + [pytest.param(_incast(True, receiver="go_back_n", routing="ecmp", ack_every=64), id="pfc-ack-every-64-go_back_n")]
         # the telemetry controller with INT and coalesced ACKs (a coalesced ACK echoes the INT of the
         # latest-sent unit it covers), each receiver, lossy and lossless
         + [pytest.param(_incast(lossless, receiver=r, cc="telemetry", ack_every=8),
                         id=f"{'pfc' if lossless else 'lossy'}-telemetry-ack-every-8-{r}")
            for lossless in (False, True) for r in RECEIVERS.names()]
         # DCQCN with coalesced ACKs: the ethernet profile's transport with its dcqcn_cx, and dcqcn over lossy
         # switches with ACK and NAK in the strict-priority class too (lanes)
         + [pytest.param(_incast(True, receiver="go_back_n", cc="dcqcn_cx", routing="ecmp", ack_every=64),
                         id="pfc-dcqcn_cx-ack-every-64-go_back_n"),
            pytest.param(_strict(_incast(False, receiver="go_back_n", cc="dcqcn", ack_every=8), "control"),
                         id="lossy-dcqcn-ack-every-8-go_back_n-strict-control")])


def _run(sc, kernel):
    sc = {**sc, "simulation": {**sc["simulation"], "kernel": kernel}}
    return fabricsim.run(sc)


def _comparable(summary: dict) -> dict:
    """The summary without wall-clock figures, the kernel's own name and its fallback line."""
    out = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            v = _comparable(v)
        if "wall" in k or k.endswith("_per_s") or k in ("kernel", "events"):
            continue
        if k == "warnings":
            v = [w for w in v if not w.startswith("kernel: ")]
        out[k] = v
    return out


def _compiled_slice(sc: dict) -> bool:
    """True if ``sc`` is inside the compiled core's slice (fabricsim/engine/compiled/coverage.py)."""
    from fabricsim.engine.compiled import coverage
    return (sc["routing"]["policy"] in coverage.ROUTING and sc.get("receiver", {}).get("model", "ddp") in
            coverage.RECEIVERS and sc.get("congestion_control", {}).get("algorithm", "none") in coverage.CC)


@pytest.mark.skipif(not KERNELS, reason="only the reference kernel exists")
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("scenario", CASES)
def test_every_kernel_gives_the_reference_kernels_tables(scenario, kernel):
    a = _run(scenario, REFERENCE)
    b = _run(scenario, kernel)
    assert a.summary["run"]["status"] == "complete" and a.messages.completed.all()
    pd.testing.assert_frame_equal(a.messages, b.messages)
    pd.testing.assert_frame_equal(a.links, b.links)
    assert _comparable(a.summary) == _comparable(b.summary)
    if kernel == "compiled":
        # the suite must not pass on fallbacks: inside the slice the run is compiled, outside it
        # runs on heap and says why
        info = b.summary["run"]["kernel"]
        if _compiled_slice(scenario):
            assert info["ran"] == "compiled" and b.summary["kernel"] == "compiled", info
            assert a.summary["run"]["events"] == b.summary["run"]["events"]     # the same agenda entries
        else:
            assert info["ran"] == "heap" and info["fallback"] in b.summary["warnings"], info


def test_the_suite_reaches_what_it_claims():
    # drops and retransmissions in the lossy incast, pauses and CNPs in the lossless one: a case
    # that stopped reaching its branch would make the suite pass for the wrong reason
    lossy = fabricsim.run(_incast(False, receiver="reorder_buffer"))
    assert lossy.summary["run"]["dropped_packets"] > 0 and lossy.summary["transport"]["retransmitted_bytes"] > 0
    assert lossy.summary["transport"]["out_of_order_fraction"] > 0
    rto = fabricsim.run(_incast(False, rto_mode="adaptive"))
    run = rto.summary["run"]
    assert run["timeout_probes"] > 0 and run["dsacks_received"] > 0 and run["spurious_timeout_probes"] > 0
    pfc = fabricsim.run(_incast(True, cc="dcqcn", routing="ecmp"))
    t = pfc.summary["transport"]
    assert t["pfc_pause_events"] > 0 and t["cnps"] > 0 and pfc.summary["run"]["dropped_packets"] == 0
