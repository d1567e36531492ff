"""One function, two questions, for every routing policy with a flow-level meaning: the packet
choice (``choose()``) and the flow-level share (``weights()``) come from the same function, and
the flow engine asks the policy for the share (engine/spread.py owns the capacities only)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import fabricsim
from fabricsim.engine.rng import RandomStreams
from fabricsim.flows.identity import packet_draw
from fabricsim.routing import ROUTING
from fabricsim.routing.adaptive import Adaptive
from fabricsim.routing.quality import balanced_shares
from fabricsim.routing.spray import Spray, spray_index, spray_shares


@pytest.mark.parametrize("bits", [3, 5, 8, 10])
def test_spray_shares_are_the_distribution_of_spray_index_over_every_draw(bits):
    for n in range(1, 13):
        counts = np.bincount([spray_index(v, n) for v in range(1 << bits)], minlength=n)
        assert spray_shares(n, draw_bits=bits) == (counts / (1 << bits)).tolist(), (bits, n)


def test_spray_chooses_the_port_spray_index_gives_the_packet_s_draw():
    streams = RandomStreams(7)
    pol = Spray(None, streams)
    salt = RandomStreams(7).u64("routing.spray.salt")
    ports = tuple(range(5))
    sw = SimpleNamespace(id=11)
    for seq in range(200):
        pkt = SimpleNamespace(qp=SimpleNamespace(uid=3), seq=seq, t_tx=1000 * seq, kind=0)
        assert pol.choose(sw, ports, pkt, 0) == ports[spray_index(packet_draw(salt, pkt, 11), 5)]
    assert pol.weights(sw, ports, None) == spray_shares(5)


@pytest.mark.parametrize("policy", ["adaptive", "flowlet"])
def test_load_balancing_policies_share_in_proportion_to_capacity(policy):
    cls = ROUTING.get(policy)
    pol = cls(cls.Params(), RandomStreams(1))
    sw = SimpleNamespace(id=3)
    assert pol.weights(sw, [0, 1, 2], None, capacity_bps=[400e9, 200e9, 200e9]) == [0.5, 0.25, 0.25]
    assert pol.weights(sw, [0, 1, 2, 3], None) == [0.25] * 4               # capacities unknown: equal
    assert pol.weights(sw, [0, 1], None, capacity_bps=[0.0, 0.0]) == [0.5, 0.5]
    assert balanced_shares([3.0, 1.0]).tolist() == [0.75, 0.25]


def test_every_built_in_policy_with_a_flow_level_meaning_answers_weights():
    for name in ROUTING.names():
        cls = ROUTING.get(name)
        pol = cls(cls.Params() if cls.Params else None, RandomStreams(1))
        qp = SimpleNamespace(uid=1, hash=12345)
        ports = [SimpleNamespace(index=i, peer=100 + i) for i in range(4)]
        w = pol.weights(SimpleNamespace(id=9), ports, qp, capacity_bps=[1.0] * 4)
        assert w is not None and abs(sum(w) - 1) < 1e-12, name


SMALL = {"name": "s", "topology": {"kind": "leaf_spine", "hosts_per_leaf": 4, "leaves": 2, "spines": 4},
         "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": "256KiB"},
         "routing": {"policy": "adaptive"}, "simulation": {"seed": 1, "engine": "flow"}}


def _uplink_bytes(r) -> list[int]:
    L = r.links
    up = L[(L["kind"] == "leaf-spine") & L["src_name"].str.startswith("leaf")]
    return up["tx_bytes"].astype("int64").tolist()


def test_the_flow_engine_takes_a_shared_policy_s_split_from_the_policy(monkeypatch):
    """engine/spread.py asks ``weights()`` (with the capacities): a policy answering "all on the
    first port" moves every byte of the flow run onto one uplink per leaf."""
    even = _uplink_bytes(fabricsim.run(SMALL))
    assert len(set(even)) == 1 and even[0] > 0                # capacity-proportional: every uplink alike

    def first_port(self, switch, ports, qp, control=False, capacity_bps=None):
        assert capacity_bps is not None and len(capacity_bps) == len(ports)
        return [1.0] + [0.0] * (len(ports) - 1)
    monkeypatch.setattr(Adaptive, "weights", first_port)
    skewed = _uplink_bytes(fabricsim.run(SMALL))
    assert sorted(skewed)[-2:] == [sum(even) // 2] * 2 and sorted(skewed)[:-2] == [0] * (len(skewed) - 2)
