"""The flow engine charges every queue pair its exact wire bytes: whole MTU packets, then one short
last packet paying a whole header (the packet engine's framing, ``analysis.ideal.message_packets``),
in payload-equivalent units; payload figures (delivered bytes, goodput) stay in payload.
Hand-computed expectations: every link 400 Gbit/s (20 ps per byte), MTU 4096, header 82."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fabricsim
from fabricsim.analysis.ideal import message_packets
from fabricsim.engine.flow import queue_pair_wire_bytes
from fabricsim.flows.identity import split_bytes
from fabricsim.net.nvlink import nvlink_wire_bytes

from test_theory import csv_traffic, leaf_spine, scenario

MTU, HDR = 4096, 82
PS_PER_BYTE = 20                     # 400 Gbit/s
ROOT = Path(__file__).resolve().parents[1]
# host -> leaf -> spine -> leaf -> host (tests/test_theory.py's leaf_spine): propagation of the
# two host links and two fabric links, forwarding of three switches
PATH_PS = 2 * 500_000 + 2 * 700_000 + 3 * 600_000


def _wire(size: int) -> tuple[int, int, int]:
    """(wire bytes, largest packet, last packet) of one queue pair of ``size`` bytes, by hand."""
    full, rest = divmod(size, MTU)
    packets = [MTU + HDR] * full + ([rest + HDR] if rest else []) or [0]
    return sum(packets), max(packets), packets[-1]


@pytest.mark.parametrize("framing", [(4096, 82, None), (4096, 16, 256), (1000, 16, 256)])
def test_queue_pair_wire_bytes_is_the_ideal_models_framing(framing):
    """The engine's vectorised wire bytes, summed over a message's queue pairs, are
    ``message_packets``' (the references' and the lower bound's) for every size and split."""
    unit, hdr, pp = framing
    full_wire = unit + hdr if pp is None else nvlink_wire_bytes(unit, pp, hdr)
    sizes = list(range(0, 3 * unit + 7, 37)) + [1, unit - 1, unit, unit + 1, 5000, 2**20 + 3]
    for qps in (1, 2, 3, 8):
        for size in sizes:
            full, partial = message_packets(size, qps, unit, hdr, pp)
            got = queue_pair_wire_bytes(np.array(split_bytes(size, qps)), unit, hdr, pp or 0)
            assert int(got.sum()) == full * full_wire + sum(partial), (size, qps)


@pytest.mark.parametrize("size", [1024, 5000, 3 * 4096 + 100])
def test_two_short_messages_from_one_host_serialise_their_exact_wire_bytes(tmp_path, size):
    """Host 0 sends S bytes to hosts 3 and 4 (the other leaf, one spine). The flow engine: the NIC
    sends both messages' wire bytes at line rate (2 W x 20 ps), then the last byte needs its
    message's pipeline latency, that of a train alone on the idle path: (hops - 1) x the largest
    packet's serialisation (on equal-rate hops every later packet waits behind it) + the path's
    propagation and forwarding. Charged payload / share instead (1024 / 0.98 = 1044.5 wire bytes
    for a 1106-byte packet) the pair finished before the lower bound.

    The packet engine ends at the same time for single-packet messages; with a full packet ahead
    of the short one it ends one short-packet serialisation sooner: the two trains part on the
    last hop (leaf -> host 3 / host 4), where the last message's short packet waits only behind
    its own full packet, not behind the other message's short one as on the shared hops (the
    fluid gives both messages the alone pipeline latency after the NIC)."""
    wire, largest, last = _wire(size)
    expected = 2 * wire * PS_PER_BYTE + 3 * largest * PS_PER_BYTE + PATH_PS
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 3, "size_bytes": size},
                                {"id": 1, "src": 0, "dst": 4, "size_bytes": size}])
    topo = leaf_spine(n_per_leaf=3, leaves=2, spines=1)
    flow = fabricsim.run(scenario(topo, tr, engine="flow", flow={"group": 0}))
    packet = fabricsim.run(scenario(topo, tr, engine="packet"))
    d_flow = flow.summary["pattern"]["duration_ps"]
    d_packet = packet.summary["pattern"]["duration_ps"]
    assert d_flow == expected
    assert d_flow >= flow.summary["pattern"]["ideal_duration_ps"]       # the lower bound
    if largest == last:                               # single-packet messages
        assert abs(d_packet - d_flow) <= 1
    else:
        assert d_packet == d_flow - last * PS_PER_BYTE
    # and the messages' own times: both end together in the fluid
    assert flow.messages["end_ps"].tolist() == [expected, expected]


def test_link_tx_bytes_are_the_exact_wire_bytes_of_the_messages_crossing_them(tmp_path):
    """A permutation of odd sizes over 2 queue pairs each: every host link carries exactly its
    messages' wire bytes (short last packets included), the leaf-spine links together twice those
    of the cross-leaf messages, and each of them what the packet engine's ECMP puts on it."""
    sizes = [1, 1000, 4097, 5000, 8193, 12_345, 65_535, 100_001]
    hosts = 8
    rows = [{"id": i, "src": i, "dst": (i + 3) % hosts, "size_bytes": s} for i, s in enumerate(sizes)]
    tr = {**csv_traffic(tmp_path, rows), "qps_per_message": 2}
    topo = leaf_spine(n_per_leaf=4, leaves=2, spines=2)
    runs = {e: fabricsim.run(scenario(topo, tr, engine=e, **({"flow": {"group": 0}} if e == "flow" else {})))
            for e in ("flow", "packet")}
    # two queue pairs: the first gets the odd byte
    wire = {r["id"]: _wire((r["size_bytes"] + 1) // 2)[0] + _wire(r["size_bytes"] // 2)[0] for r in rows}
    L = runs["flow"].links
    out = {i: 0 for i in range(hosts)}
    into = {i: 0 for i in range(hosts)}
    cross = 0
    for r in rows:
        out[r["src"]] += wire[r["id"]]
        into[r["dst"]] += wire[r["id"]]
        if r["src"] // 4 != r["dst"] // 4:
            cross += wire[r["id"]]
    checked = 0
    for link in L[L["kind"] == "host-leaf"].itertuples():     # hosts are nodes 0 .. 7
        if link.src < hosts:
            assert link.tx_bytes == out[link.src], link
        else:
            assert link.tx_bytes == into[link.dst], link
        checked += 1
    assert checked == 2 * hosts
    fabric = L[L["kind"] == "leaf-spine"]
    assert int(fabric["tx_bytes"].sum()) == 2 * cross
    pk = runs["packet"].links.set_index("link_id")
    for link in fabric.itertuples():
        assert link.tx_bytes == pk.loc[link.link_id, "tx_data_bytes"], link


def test_a_time_limit_reports_delivered_payload_not_fluid_bytes(tmp_path):
    """One message of 3 MTUs + 100 bytes stopped at 100 ns: what left the sender by then is the
    capacity's payload rate x 100 ns of fluid bytes, of which the payload share of this message
    (its payload over its fluid size, 3 x 4096 + 182 x 4096 / 4178) is delivered."""
    size = 3 * MTU + 100
    tr = csv_traffic(tmp_path, [{"id": 0, "src": 0, "dst": 5, "size_bytes": size}])
    res = fabricsim.run(scenario(leaf_spine(), tr, engine="flow", time_limit="100ns"))
    assert res.summary["run"]["status"] == "time_limit"
    share = MTU / (MTU + HDR)
    sent_fluid = 100_000 / PS_PER_BYTE * share
    fluid_size = _wire(size)[0] * share
    got = int(res.messages.loc[0, "delivered_bytes"])
    assert got == round(sent_fluid * size / fluid_size)
    assert got != round(sent_fluid)          # (the fluid bytes themselves: 4902)


def test_goodput_counts_payload_for_odd_sizes(tmp_path):
    """The goodput series (10 us bins; these messages span several) and the injected count add up
    to the payload delivered, not to the fluid bytes (which are larger for short last packets)."""
    sizes = [2**20 + 1000, 3 * 2**20 + 5000, 12_345]
    tr = csv_traffic(tmp_path, [{"id": i, "src": i, "dst": 4 + i, "size_bytes": s} for i, s in enumerate(sizes)])
    res = fabricsim.run(scenario(leaf_spine(), tr, engine="flow"))
    assert res.summary["run"]["status"] == "complete"
    assert len(res.goodput) > 3
    assert int(res.goodput["delivered_bytes"].sum()) == sum(sizes) == int(res.messages["delivered_bytes"].sum())
    assert res.summary["run"]["injected_payload_bytes"] == sum(sizes)


def test_nvlink_links_carry_the_exact_nvlink_wire_bytes():
    """Inside an NVL72 rack (credit transport: 4096-byte units sent as 256-byte NVLink packets
    with 16 bytes each) a permutation of 4097-byte messages: one whole unit (16 packets, 4352
    wire bytes) and a 1-byte unit paying a whole 16-byte header, 4369 wire bytes per message on
    the way up and again on the way down. The packet engine's links carry exactly that; the flow
    engine's, spread evenly over the 18 chips, too, up to each link's rounding to whole bytes
    (charged payload / share, 4097 x 272 / 256 = 4353.06, they carried 16 bytes a message less)."""
    size, gpus = 4097, 72
    wire = 16 * (256 + 16) + (1 + 16)
    sc = {"name": "nv", "topology": {"kind": "file", "path": str(ROOT / "topologies" / "nvl72_rack.yaml")},
          "traffic": {"pattern": "permutation", "message_size": f"{size}B"}, "routing": {"policy": "ecmp"}}
    res = {e: fabricsim.run({**sc, "simulation": {"engine": e, "seed": 1}}) for e in ("packet", "flow")}
    assert int(res["packet"].links["tx_data_bytes"].sum()) == 2 * gpus * wire
    used = res["flow"].links[res["flow"].links["tx_bytes"] > 0]
    assert abs(int(used["tx_bytes"].sum()) - 2 * gpus * wire) <= len(used) / 2
