"""ECMP against its analytic references: the run's own hash placement, fluid max-min, balls into bins."""
import pytest

import fabricsim
from fabricsim.analysis.maxmin import ecmp_fluid_reference, ecmp_placement
from fabricsim.api import prepare

QUICK = "scenarios/leaf_spine_32_raw.yaml"


def _leaf_spine(hosts_per_leaf, leaves, spines, seed, size="1MiB"):
    return {"name": "bins", "profile": "none",
            "topology": {"kind": "leaf_spine", "hosts_per_leaf": hosts_per_leaf, "leaves": leaves, "spines": spines},
            "traffic": {"pattern": "permutation", "locality": "cross_leaf", "message_size": size},
            "routing": {"policy": "ecmp"}, "simulation": {"seed": seed},
            "outputs": {"link_sample_interval": "off"}}


def _uplinks_with_data(result):
    links = result.links
    leaves = set(links.loc[links.kind == "host-leaf", "dst"])
    up = links[(links.kind == "leaf-spine") & links.src.isin(leaves)]
    return {(int(r.src), int(r.dst)) for r in up.itertuples() if r.tx_data_bytes > 0}, len(up)


def test_placement_is_the_runs_own():
    """The reference puts every flow on the leaf->spine uplink the packet run used."""
    sc = _leaf_spine(4, 4, 4, seed=3)
    _, sim = prepare(sc)
    placed = {(a, b) for _m, _s, links in ecmp_placement(sim) for a, b, _k in links[1:2]}
    used, _ = _uplinks_with_data(fabricsim.run(sc))
    assert used == placed


@pytest.mark.parametrize("seed", [1, 2])
def test_packet_ecmp_matches_fluid_max_min_on_its_own_placement(seed):
    """With buffers that never drop, the packet run's completion ratio is the fluid max-min one
    (the ACK load and packetisation cost a little)."""
    over = [f"simulation.seed={seed}", "topology.buffer.size=unbounded"]
    ref = ecmp_fluid_reference(QUICK, overrides=over)["completion_time_ratio"]
    got = fabricsim.run(QUICK, overrides=over).summary["effective_bandwidth"]["completion_time_ratio"]
    assert got == pytest.approx(ref, rel=0.03)
    assert got <= ref * 1.001               # max-min on fixed paths is a bound a packet run cannot beat


def test_idle_uplinks_follow_balls_into_bins():
    """n flows hashed onto n uplinks leave a fraction (1 - 1/n)^n of them idle, on average."""
    n = 8
    fractions = []
    for seed in range(1, 41):
        _, sim = prepare(_leaf_spine(n, 8, n, seed))
        used = {(a, b) for _m, _s, links in ecmp_placement(sim) for a, b, _k in links[1:2]}
        fractions.append(1 - len(used) / (8 * n))
    mean = sum(fractions) / len(fractions)
    assert mean == pytest.approx((1 - 1 / n) ** n, abs=0.02)
