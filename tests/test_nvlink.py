"""NVLink as NVLink (fabricsim/net/nvlink.py): lossless credit flow control inside a scale-up
domain, no end-to-end ACK, completion on the last byte, NVLink framing; RoCE outside the domain."""
from __future__ import annotations

import pytest

import fabricsim
from fabricsim.analysis.recorder import Recorder
from fabricsim.api import prepare
from fabricsim.engine.interface import ENGINES
from fabricsim.errors import ConfigError
from fabricsim.net.nvlink import NvlinkPort, nvlink_wire_bytes

PS_BITS = 8 * 10**12
NS = 1000


def ser(nbytes, rate_bps):
    return -((-nbytes * PS_BITS) // rate_bps)


def scenario(traffic, nvlink=None, topology=None, **extra):
    topo = topology or {"kind": "nvl72_rack"}
    if nvlink:
        topo = dict(topo, nvlink=dict(topo.get("nvlink", {}), **nvlink))
    sc = {"name": "nvl", "topology": topo, "traffic": traffic, "routing": {"policy": "spray"},
          "simulation": {"seed": 3, "time_limit": "20ms"}}
    sc.update(extra)
    return sc


def engine_run(sc):
    """Run the packet engine directly, to look at its ports and NICs afterwards."""
    _loaded, sim = prepare(sc)
    s = sim.scenario
    eng = ENGINES.get("packet")(sim, Recorder(s.outputs.latency_rel_error, s.outputs.timeseries_bin))
    return eng, eng.run()


def csv_traffic(tmp_path, rows):
    path = tmp_path / "m.csv"
    path.write_text("src,dst,size_bytes\n" + "".join(f"{s},{d},{b}\n" for s, d, b in rows))
    return {"pattern": "csv", "path": str(path)}


# ----------------------------------------------------------------------------- lossless

INCAST = {"pattern": "incast", "senders": 64, "receiver": 0, "message_size": "1MiB"}


def test_incast_inside_an_nvl72_rack_drops_nothing_and_keeps_the_receiver_links_busy():
    res = fabricsim.run(scenario(INCAST))
    run = res.summary["run"]
    assert res.summary["messages"]["completed"] == 64
    assert run["dropped_packets"] == 0 and run["dropped_control_packets"] == 0
    assert run["retransmission_timeouts"] == 0
    assert int(res.links["drops_buffer_full"].sum()) == 0
    # the 18 chip -> receiver links are busy (almost) the whole run
    into = res.links[res.links["dst"] == 0]
    assert len(into) == 18
    busy = into["tx_bytes"].astype(float) * 8e12 / (into["rate_bps"].astype(float) * run["end_ps"])
    assert busy.min() >= 0.97
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] >= 0.97


def test_the_roce_transport_on_nvlink_is_still_available_for_comparison_and_drops():
    """``nvlink.transport: roce`` is the earlier model (drop-tail chips, ACKs, RTO): the same
    incast loses packets there, which is what credit flow control removes."""
    res = fabricsim.run(scenario(INCAST, nvlink={"transport": "roce"},
                                 receiver={"model": "ddp", "rto_low": "1ms", "rto_high": "1ms"}))
    assert res.summary["run"]["dropped_packets"] > 0


def test_credits_keep_every_input_buffer_within_the_credit_buffer():
    credit = 32 * 1024
    eng, out = engine_run(scenario(INCAST, nvlink={"credit_buffer": "32KiB"}))
    assert out.status == "complete"
    gpu_to_chip = [p for p in eng.ports if isinstance(p, NvlinkPort) and p.nic is not None]
    assert len(gpu_to_chip) == 72 * 18
    unit_wire = nvlink_wire_bytes(4096, 256, 16)
    for p in gpu_to_chip:
        assert p.buffer_bytes == credit
        assert p.buffer_peak_bytes <= credit
    senders = [p for p in gpu_to_chip if 1 <= p.owner <= 64]
    # the incast fills the senders' input buffers: as many whole units as the credit allows
    assert max(p.buffer_peak_bytes for p in senders) == (credit // unit_wire) * unit_wire
    assert sum(p.credit_stalls for p in senders) > 0
    # independently of the credit bookkeeping: what a chip queues for the receiver is at most
    # what its 64 senders' input buffers can hold
    for p in eng.ports:
        if p.peer == 0:
            assert p.peak_queue_bytes <= 64 * credit + unit_wire


@pytest.mark.parametrize("spread", ["stripe", "adaptive"])
def test_credit_is_conserved_on_every_gpu_link(spread):
    """Every byte of credit a GPU link spends comes back: at the end of a run with nothing in
    flight, what the transmitter holds plus what is still on its way back is the whole buffer.
    (Regression: an attempt that took returned credit back and then found every queue pair
    finished on its link lost that credit, one unit per such attempt in an all-to-all.)"""
    eng, out = engine_run(scenario({"pattern": "all_to_all", "message_size": "64KiB"}, nvlink={"spread": spread},
                                   topology={"kind": "cluster", "domain": "hgx8", "nodes": 1}))
    assert out.status == "complete"
    gpu_to_chip = [p for p in eng.ports if isinstance(p, NvlinkPort) and p.nic is not None]
    assert len(gpu_to_chip) == 16
    for p in gpu_to_chip:
        assert p.credit_bytes + p.held_bytes == p.buffer_bytes, p.index
        assert p.held_bytes == sum(w for _r, w in p.cr_heap)


# ----------------------------------------------------------------------------- no ACKs

def test_no_control_packets_on_nvlink_links():
    res = fabricsim.run(scenario({"pattern": "all_to_all", "message_size": "64KiB"},
                                 topology={"kind": "nvl72_rack", "domain_size": 36}))
    nv = res.links[res.links["kind"] == "nvlink"]
    assert res.summary["messages"]["completed"] == 36 * 35
    assert int(nv["tx_data_bytes"].sum()) > 0
    assert int(nv["tx_control_bytes"].sum()) == 0
    assert res.summary["run"]["retransmission_timeouts"] == 0


# ----------------------------------------------------------------------------- exact times

@pytest.mark.parametrize("size", [1000, 4096, 5000, 12 * 1024])
def test_one_message_on_an_idle_nvlink_path_takes_serialisation_plus_latency_exactly(tmp_path, size):
    """The message's units leave by separate links at once, so the largest unit decides:
    serialisation on the GPU link, link delay, chip latency, serialisation on the chip's link to
    the destination, link delay."""
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, size)])))
    m = res.messages.iloc[0]
    largest = min(size, 4096)
    wire = largest + -(-largest // 256) * 16
    rate = 400 * 10**9
    expected = 2 * ser(wire, rate) + 100 * NS + 300 * NS + 100 * NS
    assert int(m["fct_ps"]) == expected
    if size <= 4096 or size % 4096 == 0:
        # (the idle-fabric reference puts a short last unit behind the full ones on one link)
        assert int(m["ideal_fct_ps"]) == expected


def test_a_unit_train_on_one_link_pipelines_exactly(tmp_path):
    """16 units over one 7.2 Tbps link (one chip, so one link per GPU): the last unit leaves the
    GPU after 16 serialisations and crosses the chip behind the others."""
    topo = {"kind": "nvl72_rack", "nvlink": {"chips": 1, "credit_buffer": "1MiB"}}   # credits > rate x loop
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 64 * 1024)]), topology=topo))
    s = ser(4352, 7200 * 10**9)
    assert int(res.messages.iloc[0]["fct_ps"]) == 16 * s + 100 * NS + 300 * NS + s + 100 * NS


def test_a_one_unit_credit_buffer_waits_one_credit_loop_per_unit(tmp_path):
    """Credit for a single unit: each unit waits until the chip has sent the previous one and the
    credit has flown back (one link delay): the loop is ser + delay + chip latency + ser + delay."""
    wire = 4352
    # the one 7.2 Tbps link per GPU stands for 18 NVLink5 links, each with this much credit
    topo = {"kind": "nvl72_rack", "nvlink": {"chips": 1, "credit_buffer": -(-wire // 18)}}
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 8 * 4096)]), topology=topo))
    s = ser(wire, 7200 * 10**9)
    loop = s + 100 * NS + 300 * NS + s + 100 * NS
    # unit i starts at i * loop and arrives one loop later (its credit flies back while it
    # crosses the last link): 8 units take 8 loops, not 8 serialisations
    assert int(res.messages.iloc[0]["fct_ps"]) == 8 * loop
    # with room for two units the link sends two per loop
    topo["nvlink"]["credit_buffer"] = -(-2 * wire // 18)
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 8 * 4096)]), topology=topo))
    assert int(res.messages.iloc[0]["fct_ps"]) == 3 * loop + s + loop


def test_framing_parameters_set_the_wire_bytes(tmp_path):
    topo = {"kind": "nvl72_rack", "nvlink": {"chips": 1, "packet_payload": "128B", "packet_header": "32B",
                                             "unit": "1KiB"}}
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 3000)]), topology=topo))
    nv = res.links[res.links["kind"] == "nvlink"]
    # 3000 B = 2 units of 1024 + one of 952 B; 8 + 8 + 8 packets of at most 128 B, 32 B each
    wire = 3000 + 24 * 32
    assert int(nv["tx_bytes"].sum()) == 2 * wire            # GPU -> chip, chip -> GPU
    assert int(nv["tx_packets"].sum()) == 2 * 24


# ----------------------------------------------------------------------------- efficiency

@pytest.mark.parametrize("pattern,size", [("permutation", "1MiB"), ("all_to_all", "128KiB")])
def test_nvl36_permutation_and_all_to_all_reach_the_nvlink_bound(pattern, size):
    res = fabricsim.run(scenario({"pattern": pattern, "message_size": size},
                                 topology={"kind": "nvl72_rack", "domain_size": 36}))
    eb = res.summary["effective_bandwidth"]
    assert eb["completion_time_ratio"] >= 0.97
    assert res.summary["run"]["dropped_packets"] == 0


@pytest.mark.parametrize("spread", ["stripe", "adaptive"])
def test_nic_transmit_attempts_almost_always_send(spread):
    eng, out = engine_run(scenario({"pattern": "permutation", "message_size": "4MiB"}, nvlink={"spread": spread},
                                   topology={"kind": "nvl72_rack", "domain_size": 36}))
    calls = sum(n.tx_calls for ns in eng.nics.values() for n in ns)
    sent = sum(n.tx_sent for ns in eng.nics.values() for n in ns)
    assert sent == 36 * 1024
    assert 1 - sent / calls < 0.02


# ----------------------------------------------------------------------------- mixed

def mixed(tmp_path, split="per_packet"):
    topo = {"kind": "cluster", "domain": "nvl36", "racks": 2, "nic": {"ports": 2, "rate": "400Gbps"}}
    rows = [(0, 1, 2**20), (2, 40, 2**20)]
    return fabricsim.run({"name": "mixed", "topology": topo, "traffic": csv_traffic(tmp_path, rows),
                          "routing": {"policy": "adaptive"}, "nic": {"plane_split": split}})


def test_a_message_leaving_the_domain_keeps_roce_and_its_acks(tmp_path):
    res = mixed(tmp_path)
    links = res.links
    nv = links[links["kind"] == "nvlink"]
    hl = links[links["kind"] == "host-leaf"]
    assert res.summary["messages"]["completed"] == 2
    assert int(nv["tx_data_bytes"].sum()) > 0 and int(nv["tx_control_bytes"].sum()) == 0
    assert int(hl["tx_data_bytes"].sum()) > 0 and int(hl["tx_control_bytes"].sum()) > 0
    # the NVLink message needed no ACK; the RoCE one was acknowledged through rack 1's NIC ports
    back = links[(links["src"] == 40) & (links["kind"] == "host-leaf")]
    assert int(back["tx_control_bytes"].sum()) > 0
    assert int(links.loc[links["src"] == 1, "tx_control_bytes"].sum()) == 0


def test_control_packets_of_a_multi_port_queue_pair_use_every_port(tmp_path):
    res = mixed(tmp_path)
    back = res.links[(res.links["src"] == 40) & (res.links["kind"] == "host-leaf")]
    assert len(back) == 2
    assert (back["tx_control_bytes"] > 0).all()
    # with per_flow the queue pair uses one port, and so do its ACKs
    res = mixed(tmp_path, "per_flow")
    back = res.links[(res.links["src"] == 40) & (res.links["kind"] == "host-leaf")]
    assert int((back["tx_control_bytes"] > 0).sum()) == 1


# ----------------------------------------------------------------------------- config

@pytest.mark.parametrize("nvlink,field", [({"unit": "1000B"}, "unit"), ({"credit_buffer": "4KiB"}, "credit_buffer")])
def test_bad_nvlink_framing_is_rejected(nvlink, field):
    with pytest.raises(ConfigError, match=field):
        prepare(scenario(INCAST, nvlink=nvlink))
    # the same field with a usable value is accepted
    prepare(scenario(INCAST, nvlink={field: "8KiB"}))


def test_same_seed_same_result():
    a = fabricsim.run(scenario(INCAST))
    b = fabricsim.run(scenario(INCAST))
    assert a.summary["run"]["events"] == b.summary["run"]["events"]
    assert a.messages["fct_ps"].tolist() == b.messages["fct_ps"].tolist()


def test_a_failed_chip_leaves_17_links_and_the_pattern_still_reaches_the_bound():
    topo = {"kind": "nvl72_rack", "domain_size": 36, "failed": {"switches": ["r0.nvs3"]}}
    res = fabricsim.run(scenario({"pattern": "permutation", "message_size": "1MiB"}, topology=topo))
    assert res.summary["messages"]["completed"] == 36
    assert res.summary["effective_bandwidth"]["sender_capacity_bps"] == 36 * 17 * 400 * 10**9
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] >= 0.97


def test_per_flow_keeps_a_queue_pair_on_one_chip(tmp_path):
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 64 * 1024)]), nic={"plane_split": "per_flow"}))
    used = res.links[(res.links["src"] == 0) & (res.links["tx_bytes"] > 0)]
    assert len(used) == 1
    assert int(used["tx_bytes"].sum()) == 16 * 4352


def test_a_failed_link_of_the_destination_spreads_over_the_other_17(tmp_path):
    topo = {"kind": "nvl72_rack", "failed": {"links": [["r0.g5", "r0.nvs2"]]}}
    res = fabricsim.run(scenario(csv_traffic(tmp_path, [(0, 5, 2**20), (1, 5, 2**20)]), topology=topo))
    assert res.summary["messages"]["completed"] == 2
    out0 = res.links[(res.links["src"] == 0) & (res.links["tx_bytes"] > 0)]
    assert len(out0) == 17                          # not by chip 2, which cannot reach GPU 5
    assert res.summary["effective_bandwidth"]["completion_time_ratio"] >= 0.97


def test_heap_and_simpy_kernels_agree_inside_an_nvlink_domain():
    def run(kernel):
        return fabricsim.run(scenario({"pattern": "incast", "senders": 20, "receiver": 3, "message_size": "256KiB"},
                                      topology={"kind": "nvl72_rack", "domain_size": 36})
                             | {"simulation": {"kernel": kernel, "seed": 2}})
    a, b = run("heap"), run("simpy")
    assert a.messages["fct_ps"].tolist() == b.messages["fct_ps"].tolist()
    assert a.links.equals(b.links)


def test_bench_nvlink_quick_runs_and_writes_its_report(tmp_path):
    import json
    from conftest import load_bench
    mod = load_bench("bench_nvlink")
    out = tmp_path / "nvlink.json"
    assert mod.main(["--quick", "--json", str(out)]) == 0
    rows = {(r["scenario"], r["model"]): r for r in json.loads(out.read_text())["rows"]}
    credit = rows[("incast_32to1_256KiB", "credit")]
    assert credit["dropped_packets"] == 0 and credit["nvlink_control_bytes"] == 0
    assert rows[("incast_32to1_256KiB", "roce")]["nvlink_control_bytes"] > 0
