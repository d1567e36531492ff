"""The max-min solver (fabricsim.flows.fluid), compiled and vectorised, against the pure-Python
reference, hand answers, its own optimality checker and each other."""
import doctest
import functools

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

from fabricsim.analysis.maxmin import max_min_rates
from fabricsim.flows import fluid
from fabricsim.flows.fluid import FluidProblem, check_max_min, max_min_fair
from fabricsim.flows.fluid import max_min_fair as _max_min_fair


#: every test that does not depend on one solver's internals runs on both, the compiled one with
#: its links' sums kept eagerly, lazily, or directly on the flows' links (fluid_compiled._LAZY and
#: _DIRECT: the choices a solve makes by the problem's segment widths, forced here)
METHODS = pytest.mark.parametrize("method", [pytest.param("compiled", id="compiled-eager"),
                                             pytest.param("compiled", id="compiled-direct"),
                                             pytest.param("compiled", id="compiled-lazy"),
                                             pytest.param("compiled", id="compiled-whole"), "vectorised"])


@pytest.fixture(autouse=True)
def _link_sums(request, monkeypatch):
    """Force the compiled solver's eager or lazy link sums for the ``compiled-eager`` and
    ``compiled-lazy`` cases of :data:`METHODS`, sums on the flows' links (``F @ V``) for
    ``compiled-direct``, and lazy sums over the whole ``V`` (not renumbered) for
    ``compiled-whole`` (others: the solver's own choice)."""
    spec = getattr(request.node, "callspec", None)
    ids = spec.id if spec is not None else ""
    sums = spec.params.get("link_sums") if spec is not None else None
    if sums is not None:
        ids = f"compiled-{sums}"
    if any(f"compiled-{m}" in ids for m in ("lazy", "eager", "whole", "direct")):
        from fabricsim.flows import fluid_compiled
        eager = "compiled-eager" in ids or "compiled-direct" in ids
        monkeypatch.setattr(fluid_compiled, "_LAZY", float("inf") if eager else -1.0)
        monkeypatch.setattr(fluid_compiled, "_DIRECT", float("inf") if "compiled-direct" in ids else 0.0)
        monkeypatch.setattr(fluid_compiled, "_WHOLE", 0.0 if "compiled-whole" in ids else float("inf"))


#: the compiled solver's own tests run with both ways of keeping the links' sums
LINK_SUMS = pytest.mark.parametrize("link_sums", ["eager", "direct", "lazy", "whole"])


def test_doctests():
    assert doctest.testmod(fluid).failed == 0


def one_hot(paths, n_links):
    """F = identity, V = one row per flow with 1 on each of its links."""
    rows, cols = [], []
    for i, p in enumerate(paths):
        for link in sorted(set(p)):
            rows.append(i)
            cols.append(link)
    V = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(paths), n_links))
    return sp.identity(len(paths), format="csr"), V


def shared_segments(paths, n_links):
    """The same usage factorised differently: each path cut into a head and a tail, identical
    pieces shared by every flow that uses them."""
    pieces: dict = {}
    frows, fcols = [], []
    for i, p in enumerate(paths):
        links = sorted(set(p))
        cut = len(links) // 2
        for piece in (tuple(links[:cut]), tuple(links[cut:])):
            if piece:
                frows.append(i)
                fcols.append(pieces.setdefault(piece, len(pieces)))
    vrows, vcols = [], []
    for piece, s in pieces.items():
        for link in piece:
            vrows.append(s)
            vcols.append(link)
    F = sp.csr_matrix((np.ones(len(frows)), (frows, fcols)), shape=(len(paths), len(pieces)))
    V = sp.csr_matrix((np.ones(len(vrows)), (vrows, vcols)), shape=(len(pieces), n_links))
    return F, V


instances = st.integers(1, 6).flatmap(lambda n_links: st.tuples(
    st.just(n_links),
    st.lists(st.lists(st.integers(0, n_links - 1), max_size=4), min_size=1, max_size=10),
    st.lists(st.one_of(st.integers(1, 4).map(float), st.floats(0.1, 10.0)),
             min_size=n_links, max_size=n_links)))


@METHODS
@settings(max_examples=150, deadline=None)
@given(inst=instances)
def test_agrees_with_reference(inst, method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    n_links, paths, caps = inst
    ref = max_min_rates(paths, dict(enumerate(caps)))
    cap = np.array(caps)
    for F, V in (one_hot(paths, n_links), shared_segments(paths, n_links)):
        got = max_min_fair(F, V, cap).rates
        np.testing.assert_allclose(got, ref, rtol=1e-7)
        assert check_max_min(F, V, cap, got) == []


@METHODS
def test_weighted_split_by_hand(method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    # flow 0: half on link 0, half on link 1; flow 1: link 1 only; flow 2: link 0 only.
    # caps 1 and 3. Link 0: 0.5 r0 + r2 <= 1 saturates first at r = 2/3 (flows 0 and 2);
    # link 1: 0.5 * 2/3 + r1 <= 3 gives r1 = 3 - 1/3.
    V = sp.csr_matrix(np.array([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]]))
    F = sp.identity(3, format="csr")
    sol = max_min_fair(F, V, np.array([1.0, 3.0]))
    np.testing.assert_allclose(sol.rates, [2 / 3, 3 - 1 / 3, 2 / 3], rtol=1e-12)
    if method == "vectorised":
        assert sol.iterations == 2
    # the same split through F: flow 0 is 0.5 on segment "link 0" and 0.5 on segment "link 1"
    F2 = sp.csr_matrix(np.array([[0.5, 0.5], [0.0, 1.0], [1.0, 0.0]]))
    V2 = sp.identity(2, format="csr")
    np.testing.assert_allclose(max_min_fair(F2, V2, np.array([1.0, 3.0])).rates, sol.rates, rtol=1e-12)


def random_weighted(rng, n, s, L):
    F = sp.random(n, s, density=0.3, random_state=rng, format="csr")
    V = sp.random(s, L, density=0.3, random_state=rng, format="csr")
    cap = rng.uniform(0.5, 5.0, L)
    cap[rng.random(L) < 0.1] = np.inf
    return F, V, cap


@pytest.mark.parametrize("seed", range(20))
@METHODS
def test_checker_accepts_solver_and_rejects_perturbed(seed, method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    rng = np.random.default_rng(seed)
    F, V, cap = random_weighted(rng, 30, 12, 15)
    limit = np.where(rng.random(30) < 0.2, rng.uniform(0.0, 2.0, 30), np.inf)
    rates = max_min_fair(F, V, cap, limit=limit).rates
    assert check_max_min(F, V, cap, rates, limit=limit) == []
    finite = np.flatnonzero(np.isfinite(rates) & (rates > 0))
    if finite.size:
        f = finite[0]
        lower = rates.copy()
        lower[f] *= 0.9                   # feasible but not max-min: f could rise
        assert check_max_min(F, V, cap, lower, limit=limit)
        higher = rates.copy()
        higher[f] *= 1.1                  # infeasible on its bottleneck or above its limit
        assert check_max_min(F, V, cap, higher, limit=limit)


@METHODS
def test_limits(method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    F, V = one_hot([[0], [0], [0]], 1)
    sol = max_min_fair(F, V, np.array([3.0]), limit=np.array([0.5, np.inf, 4.0]))
    np.testing.assert_allclose(sol.rates, [0.5, 1.25, 1.25])
    # a limit on a flow crossing nothing
    F, V = one_hot([[], [0]], 1)
    np.testing.assert_allclose(max_min_fair(F, V, np.array([1.0]), limit=np.array([2.0, np.inf])).rates,
                               [2.0, 1.0])


@METHODS
def test_edge_cases(method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    # zero flows
    sol = max_min_fair(sp.csr_matrix((0, 2)), sp.identity(2, format="csr"), np.ones(2))
    assert sol.rates.shape == (0,) and sol.iterations == 0
    # all-zero row, flow on an infinite link only, zero-capacity link
    F = sp.identity(4, format="csr")
    V = sp.csr_matrix(np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 0, 1.0]]))
    cap = np.array([0.0, np.inf, 2.0])
    r = max_min_fair(F, V, cap).rates
    assert r[0] == np.inf and r[1] == np.inf and r[2] == 0.0 and r[3] == 0.0
    assert check_max_min(F, V, cap, r) == []
    # explicit zeros stored in the matrix do not count as crossing
    V0 = sp.csr_matrix((np.array([0.0, 1.0]), np.array([0, 1]), np.array([0, 1, 2])), shape=(2, 2))
    r = max_min_fair(sp.identity(2, format="csr"), V0, np.array([1.0, 1.0])).rates
    assert r.tolist() == [np.inf, 1.0]
    # duplicate entries are summed: coefficient 2 on link 0
    Vd = sp.csr_matrix((np.array([1.0, 1.0]), np.array([0, 0]), np.array([0, 2])), shape=(1, 1))
    assert max_min_fair(sp.identity(1, format="csr"), Vd, np.array([1.0])).rates.tolist() == [0.5]
    # invalid inputs
    with pytest.raises(ValueError):
        max_min_fair(sp.identity(1, format="csr"), sp.csr_matrix(np.array([[-1.0]])), np.ones(1))
    with pytest.raises(ValueError):
        max_min_fair(sp.identity(1, format="csr"), sp.identity(1, format="csr"), np.ones(2))


def test_checker_flags_infinite_and_overload():
    F, V = one_hot([[0], [0]], 1)
    assert check_max_min(F, V, np.array([1.0]), np.array([np.inf, 0.0]))
    assert check_max_min(F, V, np.array([1.0]), np.array([0.6, 0.6]))
    assert check_max_min(F, V, np.array([1.0]), np.array([0.5, 0.5])) == []


@pytest.mark.parametrize("seed", range(5))
@METHODS
def test_active_mask_equals_solving_the_active_rows(seed, method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    rng = np.random.default_rng(100 + seed)
    F, V, cap = random_weighted(rng, 40, 15, 20)
    limit = np.where(rng.random(40) < 0.2, rng.uniform(0.0, 2.0, 40), np.inf)
    active = rng.random(40) < 0.6
    prob = FluidProblem(F, V, cap)
    masked = prob.solve(method=method, active=active, limit=limit).rates
    alone = max_min_fair(F[active], V, cap, limit=limit[active]).rates
    np.testing.assert_allclose(masked[active], alone, rtol=1e-9)
    assert (masked[~active] == 0).all()
    # the prepared problem re-solved with everything, and with another F on the same links
    np.testing.assert_allclose(prob.solve(method=method, limit=limit).rates, max_min_fair(F, V, cap, limit=limit).rates)
    np.testing.assert_allclose(prob.with_flows(F[active]).solve(method=method, limit=limit[active]).rates, alone, rtol=1e-9)


@METHODS
def test_batches_equal_levels_in_one_iteration(method):
    # 50 disjoint links of equal capacity, one flow each: one level, one batch (vectorised) or
    # one step (compiled: more links than it takes off the heap one by one)
    F, V = one_hot([[i] for i in range(50)], 50)
    sol = max_min_fair(F, V, np.ones(50), method=method)
    assert sol.iterations == 1 and np.allclose(sol.rates, 1.0)


@METHODS
def test_many_links_window(method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    # more links than the candidate window: levels found across window rebuilds
    rng = np.random.default_rng(7)
    n_links, n = 5000, 4000
    paths = [list(rng.choice(n_links, 3, replace=False)) for _ in range(n)]
    F, V = one_hot(paths, n_links)
    cap = rng.uniform(1.0, 10.0, n_links)
    r = max_min_fair(F, V, cap).rates
    assert check_max_min(F, V, cap, r) == []
    ref = max_min_rates(paths[:1500], dict(enumerate(cap)))
    np.testing.assert_allclose(max_min_fair(F[:1500], V, cap).rates, ref, rtol=1e-7)


def fabric_instance(seed, n_flows=3000, hosts=64, leaves=8, spines=4, planes=1):
    """Engine-like structure: per flow and plane a host-up segment, a fabric segment (leaf up to
    a spine, spine down to the destination leaf; shared by every flow of that leaf pair and
    spine) and a host-down segment; the flow split 1/planes over the planes. Returns F, V, cap
    and each flow's links (for the pure-Python reference when planes == 1)."""
    rng = np.random.default_rng(seed)
    per_leaf = hosts // leaves
    n_links = planes * (2 * hosts + 2 * leaves * spines)

    def host_up(p, h):
        return p * (n_links // planes) + h

    def host_down(p, h):
        return p * (n_links // planes) + hosts + h

    def leaf_up(p, leaf, s):
        return p * (n_links // planes) + 2 * hosts + leaf * spines + s

    def spine_down(p, s, leaf):
        return p * (n_links // planes) + 2 * hosts + leaves * spines + leaf * spines + s

    segs: dict = {}
    frows, fcols, fvals, paths = [], [], [], []
    for f in range(n_flows):
        src, dst = rng.choice(hosts, 2, replace=False)
        links = []
        for p in range(planes):
            pieces = [(host_up(p, src),), (host_down(p, dst),)]
            if src // per_leaf != dst // per_leaf:
                s = int(rng.integers(spines))
                pieces.append((leaf_up(p, src // per_leaf, s), spine_down(p, s, dst // per_leaf)))
            for piece in pieces:
                frows.append(f)
                fcols.append(segs.setdefault(piece, len(segs)))
                fvals.append(1.0 / planes)
                links.extend(piece)
        paths.append(links)
    vrows, vcols = [], []
    for piece, sid in segs.items():
        for link in piece:
            vrows.append(sid)
            vcols.append(link)
    F = sp.csr_matrix((fvals, (frows, fcols)), shape=(n_flows, len(segs)))
    V = sp.csr_matrix((np.ones(len(vrows)), (vrows, vcols)), shape=(len(segs), n_links))
    cap = rng.choice([1.0, 2.0, 4.0], n_links) * rng.uniform(0.9, 1.1, n_links)
    return F, V, cap, paths


@pytest.mark.parametrize("small_window", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_fabric_structure_mostly_inactive_against_reference(seed, small_window, monkeypatch):
    # many flows sharing segments, most rows inactive (as the flow engine passes them); with a
    # tiny window and work budget the batches are cut inside the window, whose links left out
    # must stay candidates (they once were dropped until the next rebuild)
    method = "vectorised" if small_window else "auto"
    if small_window:
        monkeypatch.setattr(fluid, "_WINDOW", 8)
        monkeypatch.setattr(fluid, "_BUDGET", 64)
    F, V, cap, paths = fabric_instance(seed)
    rng = np.random.default_rng(1000 + seed)
    active = rng.random(F.shape[0]) < 0.25
    prob = FluidProblem(F, V, cap)
    got = prob.solve(active=active, method=method).rates
    idx = np.flatnonzero(active)
    ref = max_min_rates([paths[i] for i in idx], dict(enumerate(cap)))
    np.testing.assert_allclose(got[idx], ref, rtol=1e-9)
    assert (got[~active] == 0).all()
    assert check_max_min(F[active], V, cap, got[active]) == []
    # the same through with_flows and with the inactive rows dropped
    np.testing.assert_allclose(prob.with_flows(F[active]).solve(method=method).rates, got[idx], rtol=1e-12)


@pytest.mark.parametrize("seed", range(3))
@METHODS
def test_fabric_structure_split_over_planes(seed, monkeypatch, method):
    max_min_fair = functools.partial(_max_min_fair, method=method)
    # flows split 1/4 over four planes (weighted F): the factorised solve equals the solve of the
    # formed usage A = F @ V (one segment per flow), and is max-min fair
    F, V, cap, _ = fabric_instance(seed, n_flows=1500, planes=4)
    active = np.random.default_rng(2000 + seed).random(F.shape[0]) < 0.4
    got = FluidProblem(F, V, cap).solve(method=method, active=active).rates
    A = (F @ V).tocsr()
    flat = FluidProblem(sp.identity(F.shape[0], format="csr"), A, cap).solve(method=method, active=active).rates
    np.testing.assert_allclose(got, flat, rtol=1e-9)
    assert check_max_min(F[active], V, cap, got[active]) == []
    # the vectorised solver with a tiny window and budget
    monkeypatch.setattr(fluid, "_WINDOW", 4)
    monkeypatch.setattr(fluid, "_BUDGET", 16)
    np.testing.assert_allclose(FluidProblem(F, V, cap).solve(method="vectorised", active=active).rates, got,
                               rtol=1e-9)


@pytest.mark.parametrize("seed", range(4))
@LINK_SUMS
def test_compiled_equals_vectorised_on_engine_like_problems(seed, link_sums):
    # the two implementations of one algorithm: same rates (within rounding) with limits, an
    # active mask, zero-capacity and unconstrained links, and both max-min fair
    F, V, cap, _ = fabric_instance(seed, n_flows=2500, planes=2 if seed % 2 else 1)
    rng = np.random.default_rng(3000 + seed)
    cap = cap.copy()
    cap[rng.random(cap.size) < 0.02] = np.inf
    cap[rng.random(cap.size) < 0.005] = 0.0
    limit = np.where(rng.random(F.shape[0]) < 0.1, rng.uniform(0.01, 0.5, F.shape[0]), np.inf)
    active = rng.random(F.shape[0]) < 0.7
    prob = FluidProblem(F, V, cap)
    a = prob.solve(active=active, limit=limit, method="compiled").rates
    b = prob.solve(active=active, limit=limit, method="vectorised").rates
    np.testing.assert_allclose(a, b, rtol=1e-9)
    assert check_max_min(F[active], V, cap, a[active], limit=limit[active]) == []


def test_unknown_method():
    F, V = one_hot([[0]], 1)
    with pytest.raises(ValueError, match="method must be one of"):
        max_min_fair(F, V, np.ones(1), method="fast")


def all_to_all_instance(seed, hosts=32, leaves=4, spines=4, planes=1):
    """Half the pairs of an all-to-all on a leaf-spine with one ECMP spine per pair and plane,
    every link of capacity 0.1: many links at exactly the same level, reached by sums taken in
    different orders (rates of one level differing in the last bits)."""
    rng = np.random.default_rng(seed)
    per_leaf = hosts // leaves
    per_plane = 2 * hosts + 2 * leaves * spines
    segs: dict = {}
    frows, fcols, fvals = [], [], []
    f = 0
    for src in range(hosts):
        for dst in range(hosts):
            if src == dst or rng.random() < 0.5:
                continue
            for p in range(planes):
                base = p * per_plane
                pieces = [(base + src,), (base + hosts + dst,)]
                if src // per_leaf != dst // per_leaf:
                    s = int(rng.integers(spines))
                    pieces.append((base + 2 * hosts + (src // per_leaf) * spines + s,
                                   base + 2 * hosts + leaves * spines + (dst // per_leaf) * spines + s))
                for piece in pieces:
                    frows.append(f)
                    fcols.append(segs.setdefault(piece, len(segs)))
                    fvals.append(1.0 / planes)
            f += 1
    vrows, vcols = [], []
    for piece, sid in segs.items():
        for link in piece:
            vrows.append(sid)
            vcols.append(link)
    F = sp.csr_matrix((fvals, (frows, fcols)), shape=(f, len(segs)))
    V = sp.csr_matrix((np.ones(len(vrows)), (vrows, vcols)), shape=(len(segs), planes * per_plane))
    return F, V, np.full(planes * per_plane, 0.1)


@pytest.mark.parametrize("seed", range(6))
@LINK_SUMS
def test_warm_start_equals_cold_solve_through_a_run(seed, link_sums):
    # an engine-like sequence: flows end (the fastest first, and random ones) and new flows
    # start; each warm solve resumes from the previous one and must give the cold solve's rates
    planes = 2 if seed % 2 else 1
    F, V, cap, _ = fabric_instance(seed, n_flows=3000, planes=planes)
    rng = np.random.default_rng(4000 + seed)
    n = F.shape[0]
    active = np.zeros(n, bool)
    active[:n * 2 // 5] = True
    prob = FluidProblem(F, V, cap)
    prev = prob.solve(active=active, method="compiled")
    earlier = np.where(active, prev.rates, np.nan)
    kept_total = 0
    for step in range(12):
        alive = np.flatnonzero(active)
        r = prev.rates[alive]
        # the fastest few end, plus a random few; new flows start every other step
        end = alive[np.argsort(-r, kind="stable")[:max(1, alive.size // 30)]]
        end = np.unique(np.concatenate([end, rng.choice(alive, max(1, alive.size // 100), replace=False)]))
        r_gone = float(earlier[end].min())
        active[end] = False
        if step % 2:
            idle = np.flatnonzero(~active)
            active[rng.choice(idle, min(idle.size, max(1, alive.size // 25)), replace=False)] = True
        cold = prob.solve(active=active, method="compiled")
        vec = prob.solve(active=active, method="vectorised")
        sol = prob.solve(active=active, method="compiled", warm=(earlier, r_gone))
        np.testing.assert_allclose(sol.rates, cold.rates, rtol=1e-9)
        np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
        assert check_max_min(F[active], V, cap, sol.rates[active]) == []
        kept_total += sol.kept
        prev = sol
        earlier = np.where(active, sol.rates, np.nan)
    # the warm start does reuse rates (without ended flows slower than the rest it keeps many)
    assert kept_total > 0


@LINK_SUMS
def test_warm_start_with_rates_of_one_level_differing_by_rounding(link_sums):
    # every link of capacity 0.1: flows of one level, frozen at different links, get rates that
    # differ in the last bits; an ended flow's rate a hair above a continuing flow of its level
    # once kept the latter (t* taken exactly) and overloaded nothing but left it too slow
    for seed in range(10):
        F, V, cap = all_to_all_instance(seed, planes=1 + seed % 3)
        rng = np.random.default_rng(seed)
        active = np.ones(F.shape[0], bool)
        prob = FluidProblem(F, V, cap)
        earlier = prob.solve(active=active, method="compiled").rates.copy()
        for _ in range(15):
            alive = np.flatnonzero(active)
            end = rng.choice(alive, max(1, alive.size // 20), replace=False)
            r_gone = float(earlier[end].min())
            active[end] = False
            cold = prob.solve(active=active, method="compiled")
            sol = prob.solve(active=active, method="compiled", warm=(earlier, r_gone))
            np.testing.assert_allclose(sol.rates, cold.rates, rtol=1e-9)
            earlier = np.where(active, sol.rates, np.nan)


@LINK_SUMS
def test_warm_start_bound_on_a_saturated_link(link_sums):
    # link 0 (cap 2) carries flows a, b at 1 each; link 1 (cap 10) carries c alone at 10... and
    # flow d (link 2, cap 0.5) is slow. A new flow on link 0 lowers a and b to 2/3: its bound
    # cap / (D + a) = 2/3 keeps d (0.5 < 2/3) and refills a, b, c.
    V = sp.identity(3, format="csr")
    F = sp.csr_matrix(np.array([[1.0, 0, 0], [1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.0, 0, 0]]))
    cap = np.array([2.0, 10.0, 0.5])
    prob = FluidProblem(F, V, cap)
    act = np.array([True, True, True, True, False])
    first = prob.solve(active=act, method="compiled")
    np.testing.assert_allclose(first.rates[:4], [1.0, 1.0, 10.0, 0.5])
    earlier = np.where(act, first.rates, np.nan)
    sol = prob.solve(active=np.ones(5, bool), method="compiled", warm=(earlier, np.inf))
    np.testing.assert_allclose(sol.rates, [2 / 3, 2 / 3, 10.0, 0.5, 2 / 3], rtol=1e-12)
    assert sol.kept == 1


@LINK_SUMS
def test_warm_start_refills_a_flow_just_below_the_ended_flows_rate(link_sums):
    # flows a and b share link 0 (cap 2, rate 1 each); a ends. Its rate as the caller saw it is
    # 1, b's earlier rate a hair below by rounding: b shares a's level and must be refilled (to 2)
    # rather than kept at 1 (t* taken without a margin would keep it)
    F = sp.identity(2, format="csr")
    V = sp.csr_matrix(np.array([[1.0], [1.0]]))
    prob = FluidProblem(F, V, np.array([2.0]))
    earlier = np.array([1.0, 1.0 - 1e-15])
    sol = prob.solve(active=np.array([False, True]), method="compiled", warm=(earlier, 1.0))
    assert sol.kept == 0
    np.testing.assert_allclose(sol.rates, [0.0, 2.0], rtol=1e-12)


def blocks(F, V, cap, copies):
    """``copies`` independent copies of a problem (block diagonal): every level repeated exactly,
    so the compiled solver's steps take large ties."""
    return (sp.block_diag([F] * copies, format="csr"), sp.block_diag([V] * copies, format="csr"),
            np.tile(cap, copies))


@pytest.mark.parametrize("seed", range(8))
@LINK_SUMS
def test_large_exact_ties_on_both_solvers_and_warm(seed, link_sums):
    # 64 copies of a random problem: each level is reached by 64 links at once, more than the
    # compiled solver takes off the heap one by one, so the rest of the tie is collected in one
    # pass over the heap (keys re-checked, heap rebuilt)
    rng = np.random.default_rng(5000 + seed)
    F0, V0, cap0 = random_weighted(rng, 30, 12, 15)
    F, V, cap = blocks(F0, V0, cap0, 64)
    single = max_min_fair(F0, V0, cap0, method="vectorised").rates
    comp = max_min_fair(F, V, cap, method="compiled")
    np.testing.assert_allclose(comp.rates, np.tile(single, 64), rtol=1e-9)
    np.testing.assert_allclose(max_min_fair(F, V, cap, method="vectorised").rates, comp.rates, rtol=1e-9)
    assert comp.iterations <= 2 * 15           # at most one step per distinct level (and limits)
    # a warm start after one flow of every copy ended
    active = np.ones(F.shape[0], bool)
    active[::30] = False
    r_gone = float(comp.rates[::30].min())
    prob = FluidProblem(F, V, cap)
    warm = prob.solve(active=active, method="compiled", warm=(comp.rates, r_gone))
    cold = prob.solve(active=active, method="vectorised")
    np.testing.assert_allclose(warm.rates, cold.rates, rtol=1e-9)


@LINK_SUMS
def test_parallel_links_merge_only_with_equal_coefficients(link_sums):
    # one segment on two links private to it: A (coefficient 1, cap 1) and B (coefficient 2,
    # cap 1): B binds, r = 0.5. Merging B into A (same capacity, other coefficient) would give 1
    F = sp.identity(1, format="csr")
    V = sp.csr_matrix(np.array([[1.0, 2.0]]))
    for method in ("compiled", "vectorised"):
        np.testing.assert_allclose(max_min_fair(F, V, np.array([1.0, 1.0]), method=method).rates, [0.5])
    # equal coefficients and capacities: merged, the same answer as one link
    V = sp.csr_matrix(np.array([[0.25, 0.25, 0.25, 0.25]]))
    np.testing.assert_allclose(max_min_fair(F, V, np.ones(4), method="compiled").rates, [4.0])


@LINK_SUMS
def test_large_tie_rechecks_stale_keys(link_sums):
    # per copy: flows f1, f2 on link A (cap 2, level 1); f2 and f3 on X (cap 2.6: level 1.3 at
    # first, 1.6 once f2 froze at 1); f4 alone on B (cap 1.3); f3 also on Y (cap 1.45). At the
    # second level (1.3) the copies of X still have their first key 1.3: the tie collected in one
    # pass must re-check their levels (1.6) and leave them; f3 then stops at Y's 1.45
    F0 = sp.identity(4, format="csr")
    #                   A    X    B    Y
    V0 = sp.csr_matrix(np.array([[1.0, 0.0, 0.0, 0.0],      # f1
                                 [1.0, 1.0, 0.0, 0.0],      # f2
                                 [0.0, 1.0, 0.0, 1.0],      # f3
                                 [0.0, 0.0, 1.0, 0.0]]))    # f4
    cap0 = np.array([2.0, 2.6, 1.3, 1.45])
    F, V, cap = blocks(F0, V0, cap0, 64)
    for method in ("compiled", "vectorised"):
        r = max_min_fair(F, V, cap, method=method).rates
        np.testing.assert_allclose(r, np.tile([1.0, 1.0, 1.45, 1.3], 64), rtol=1e-12)


def ported_instance(seed, n_flows=2000, hosts=32, leaves=4, spines=4, ports=4):
    """ECMP-like rows as the flow engine writes them: each flow's host-up and host-down segments
    cross its hosts' ``ports`` parallel ports (coefficient 1/ports each, the ports private to
    the segment: merged by the solver), and one link per hop up and down the fabric (a segment
    per link). Returns F, V, cap and the links of each host's up segment."""
    rng = np.random.default_rng(seed)
    per_leaf = hosts // leaves
    up = lambda h, k: h * ports + k                                   # noqa: E731
    down = lambda h, k: hosts * ports + h * ports + k                 # noqa: E731
    fabric0 = 2 * hosts * ports
    n_links = fabric0 + 2 * leaves * spines
    segs: dict = {}
    rows, cols, vals = [], [], []
    for f in range(n_flows):
        src, dst = rng.choice(hosts, 2, replace=False)
        pieces = [tuple(up(src, k) for k in range(ports)), tuple(down(dst, k) for k in range(ports))]
        if src // per_leaf != dst // per_leaf:
            s = int(rng.integers(spines))
            pieces += [(fabric0 + (src // per_leaf) * spines + s,),
                       (fabric0 + leaves * spines + (dst // per_leaf) * spines + s,)]
        for piece in pieces:
            rows.append(f)
            cols.append(segs.setdefault(piece, len(segs)))
            vals.append(1.0)
    vr, vc, vv = [], [], []
    for piece, sid in segs.items():
        for link in piece:
            vr.append(sid)
            vc.append(link)
            vv.append(1.0 / len(piece))
    F = sp.csr_matrix((vals, (rows, cols)), shape=(n_flows, len(segs)))
    V = sp.csr_matrix((vv, (vr, vc)), shape=(len(segs), n_links))
    cap = np.ones(n_links)
    cap[fabric0:] = rng.choice([0.5, 1.0, 2.0], n_links - fabric0)
    return F, V, cap, [tuple(up(h, k) for k in range(ports)) for h in range(hosts)]


@pytest.mark.parametrize("seed", range(4))
def test_direct_image_through_appended_rows(seed, monkeypatch):
    # an engine-like run: rows appended in batches (with_flows(extends=True)), flows ending, warm
    # starts: the kept view of the rows (DirectImage) gives the rates a solve that renumbers its
    # active rows gives, and those of the vectorised solver
    from fabricsim.flows import fluid_compiled
    F, V, cap, _ = ported_instance(seed)
    n = F.shape[0]
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(100, n), 5, replace=False)).tolist() + [n]
    rows = cuts[0]
    prob = FluidProblem(F[:rows], V, cap)
    active = np.ones(rows, bool)
    earlier, r_gone = None, np.inf
    used = 0
    for step in range(12):
        if step % 2 and len(cuts) > 1:
            cuts.pop(0)
            new = cuts[0]
            prob = prob.with_flows(F[:new], extends=True)
            active = np.concatenate([active, np.ones(new - rows, bool)])
            rows = new
        warm = None if earlier is None else (earlier, r_gone)
        sol = prob.solve(active=active, method="compiled", warm=warm)
        used += isinstance(prob._image, fluid_compiled.DirectImage)
        monkeypatch.setattr(fluid_compiled, "_IMAGE", False)
        per_solve = FluidProblem(F[:rows], V, cap).solve(active=active, method="compiled")
        monkeypatch.setattr(fluid_compiled, "_IMAGE", True)
        vec = FluidProblem(F[:rows], V, cap).solve(active=active, method="vectorised")
        np.testing.assert_allclose(sol.rates, per_solve.rates, rtol=1e-12)
        np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
        assert check_max_min(F[:rows][active], V, cap, sol.rates[active]) == []
        alive = np.flatnonzero(active)
        end = rng.choice(alive, max(1, alive.size // 10), replace=False)
        earlier = np.where(active, sol.rates, np.nan)
        r_gone = float(earlier[end].min())
        active[end] = False
    assert used >= 10                        # the image served every solve after the first
    assert prob._image.rebuilds == 0
    assert prob._image.layouts >= 1          # and laid its rows out in the solves' order


@pytest.mark.parametrize("seed", range(3))
def test_direct_image_laid_out_again_every_solve(seed, monkeypatch):
    # the image's rows laid out after every solve in the order it set their rates (_FAR 0),
    # rows appended after a layout, and rows ended and active again (placed after the solved
    # ones): every solve gives the rates of a fresh problem, and the image's rows are F's rows
    # over its links, each exactly once
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_FAR", 0.0)
    F, V, cap, _ = ported_instance(seed, n_flows=1200)
    n = F.shape[0]
    rng = np.random.default_rng(seed)
    rows = 600
    prob = FluidProblem(F[:rows], V, cap)
    active = np.ones(rows, bool)
    earlier, r_gone = None, np.inf
    for step in range(10):
        if step in (3, 6):
            new = rows + 300
            prob = prob.with_flows(F[:new], extends=True)
            active = np.concatenate([active, np.ones(new - rows, bool)])
            rows = new
        # warm starts on odd steps (earlier rates moved into slot order), cold on even ones
        warm = (earlier, r_gone) if step % 2 and earlier is not None else None
        sol = prob.solve(active=active, method="compiled", warm=warm)
        vec = FluidProblem(F[:rows], V, cap).solve(active=active, method="vectorised")
        np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
        # some rows end (the warm start's r_gone), then about a third of the rows change state
        earlier = np.where(active, sol.rates, np.nan)
        alive = np.flatnonzero(active)
        end = rng.choice(alive, max(1, alive.size // 10), replace=False)
        r_gone = float(earlier[end].min())
        active[end] = False
        if step % 2 == 0:            # (ended rows come back only before a cold solve)
            flip = rng.random(rows) < 0.3
            active = np.where(flip, ~active, active)
        if not active.any():
            active[0] = True
    image = prob._image
    assert image.layouts >= 8
    slots = image.slot_row[:image.rows]
    np.testing.assert_array_equal(np.sort(slots), np.arange(image.rows))
    np.testing.assert_array_equal(image.row_slot[slots], np.arange(image.rows))
    # slot k holds row slot_row[k]: the same entries as a fresh image of F, whose slots are rows
    fresh = fluid_compiled.DirectImage(*prob._Vr.shape)
    assert fresh.cover(prob.F, prob._Vr, prob._cap_r)
    for k in range(0, image.rows, 7):
        r = slots[k]
        a = slice(image.a_ptr[k], image.a_ptr[k + 1])
        b = slice(fresh.a_ptr[r], fresh.a_ptr[r + 1])
        np.testing.assert_array_equal(image.glink[image.a_ind[a]], fresh.glink[fresh.a_ind[b]])
        np.testing.assert_array_equal(image.a_dat[a], fresh.a_dat[b])


def test_image_layout_puts_the_walk_first():
    from fabricsim.flows.fluid_compiled import _far_jumps, _image_layout
    # three rows of 2, 1 and 3 entries; the walk visits slot 2 then slot 0
    a_ptr = np.array([0, 2, 3, 6])
    a_ind = np.array([10, 11, 20, 30, 31, 32])
    a_dat = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    slot_row = np.array([5, 6, 7])
    b_ptr, b_ind, b_dat, b_row = (np.zeros(4, np.int64), np.zeros(6, np.int64), np.zeros(6),
                                  np.zeros(3, np.int64))
    _image_layout(np.array([2, 0]), 2, 3, a_ptr, a_ind, a_dat, slot_row, b_ptr, b_ind, b_dat, b_row,
                  np.zeros(3, np.bool_))
    np.testing.assert_array_equal(b_ptr, [0, 3, 5, 6])
    np.testing.assert_array_equal(b_ind, [30, 31, 32, 10, 11, 20])
    np.testing.assert_array_equal(b_dat, [4.0, 5.0, 6.0, 1.0, 2.0, 3.0])
    np.testing.assert_array_equal(b_row, [7, 5, 6])
    assert _far_jumps(np.array([0, 1, 2, 3]), 4) == 0
    assert _far_jumps(np.array([0, 9, 10, 2]), 4) == 2      # forward by 9, and back


def test_direct_image_built_again_when_a_merged_link_is_shared(monkeypatch):
    # hosts' parallel ports are merged while private to their segment; a row appended later
    # whose segment crosses one port alone makes the merge wrong: the image is built again, and
    # the rates are those of a fresh problem (direct mode allowed for rows that grow, as host
    # 0's rows do once its ports are apart)
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_DIRECT", 2.0)
    F, V, cap, up_links = ported_instance(0, n_flows=300)
    extra_seg = V.shape[0]
    V2 = sp.vstack([V, sp.csr_matrix(([1.0], ([0], [up_links[0][1]])), shape=(1, V.shape[1]))]).tocsr()
    F2 = sp.vstack([sp.hstack([F, sp.csr_matrix((F.shape[0], 1))]),
                    sp.csr_matrix(([1.0], ([0], [extra_seg])), shape=(1, extra_seg + 1))]).tocsr()
    n = F.shape[0]
    prob = FluidProblem(F2[:n], V2, cap)
    for _ in range(2):                       # the second solve builds the image
        prob.solve(method="compiled")
    image = prob._image
    assert isinstance(image, fluid_compiled.DirectImage) and image.rebuilds == 0
    prob = prob.with_flows(F2, extends=True)
    sol = prob.solve(method="compiled")
    assert prob._image is image and image.rebuilds == 1
    vec = FluidProblem(F2, V2, cap).solve(method="vectorised")
    np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
    # the flow alone on one of host 0's ports shares it with host 0's flows: it is no longer
    # the level of the others' merged ports
    assert check_max_min(F2, V2, cap, sol.rates) == []


def test_direct_image_is_handed_on_not_shared():
    # two problems extending one problem with different rows: each gets rates of its own rows
    # (an image shared between them would serve the second one the first one's rows)
    F, V, cap, _ = ported_instance(0, n_flows=600)
    base = FluidProblem(F[:300], V, cap)
    for _ in range(2):                                   # the second solve builds the image
        base.solve(method="compiled")
    rows_a = sp.vstack([F[:300], F[300:450]]).tocsr()
    rows_b = sp.vstack([F[:300], F[450:600]]).tocsr()
    pa = base.with_flows(rows_a, extends=True)
    pb = base.with_flows(rows_b, extends=True)
    ra, rb = pa.solve(method="compiled"), pb.solve(method="compiled")
    for rows, r in ((rows_a, ra), (rows_b, rb)):
        vec = FluidProblem(rows, V, cap).solve(method="vectorised")
        np.testing.assert_allclose(r.rates, vec.rates, rtol=1e-9)


def test_workspace_buffers_grow_and_keep_their_dtype():
    from fabricsim.flows.fluid_compiled import Workspace
    w = Workspace()
    a = w.take("x", 100, np.int64)
    assert a.dtype == np.int64 and a.size >= 100
    assert w.take("x", 50, np.int64) is a                  # long enough: the same buffer
    b = w.take("x", 50, np.float64)                         # another dtype: a new one
    assert b.dtype == np.float64 and b.size >= 50
    c = w.take("x", 1000, np.float64)
    assert c.size >= 1000
    np.testing.assert_array_equal(w.iota(40), np.arange(40))
    np.testing.assert_array_equal(w.ones(30), np.ones(30))
    w.release("x")
    assert w.take("x", 10, np.float64) is not c


def test_segments_wide_only_by_parallel_ports_are_solved_direct():
    # a GPU's 18 NVLink ports in one segment: wide before its parallel links are merged, one
    # link after; the solve renumbers, merges and goes direct (not the whole-V lazy sums), with
    # the rates of the vectorised solver
    from fabricsim.flows import fluid_compiled
    F, V, cap, _ = ported_instance(1, n_flows=800, ports=18)
    used = np.unique(F.indices)
    assert fluid_compiled._lazy(int(np.diff(V.indptr)[used].sum()), used.size)      # wide before merging
    prob = FluidProblem(F, V, cap)
    sol = prob.solve(method="compiled")
    assert isinstance(prob._image, fluid_compiled.DirectImage)        # the solve went direct
    vec = FluidProblem(F, V, cap).solve(method="vectorised")
    np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
    uses = np.zeros(V.shape[1], np.int64)

    def merged(most):
        return fluid_compiled._merged_entries(used, V.indptr, V.indices, V.data, cap, uses, np.zeros(18, np.int64),
                                              np.zeros(18), np.arange(V.shape[1]), most)
    assert merged(10 ** 9) == used.size         # every used segment down to one link
    assert not uses.any()                       # left as found
    # counting stops past `most`: the answer to "more than most?" is the same either way
    for most in (0, 1, used.size // 2, used.size - 1, used.size, used.size + 1):
        assert (merged(most) > most) == (used.size > most)
        assert not uses.any()


def test_merged_entries_counts_shared_links_without_merging_them():
    # two segments over the same four parallel links (equal capacity and coefficient): no link
    # is private, so nothing merges; a third segment of four private parallel links merges to one
    import scipy.sparse as sp
    from fabricsim.flows import fluid_compiled
    rows = [[0, 1, 2, 3], [0, 1, 2, 3], [4, 5, 6, 7]]
    V = sp.csr_matrix((np.full(12, 0.25), np.concatenate(rows), [0, 4, 8, 12]), shape=(3, 8))
    cap = np.full(8, 1e9)
    uses = np.zeros(8, np.int64)
    used = np.arange(3, dtype=np.int64)
    for most in (0, 3, 7, 8, 9, 100):
        got = fluid_compiled._merged_entries(used, V.indptr, V.indices, V.data, cap, uses, np.zeros(4, np.int64),
                                             np.zeros(4), np.arange(8), most)
        assert (got > most) == (9 > most)
        if most >= 9:
            assert got == 9
        assert not uses.any()


def test_wide_over_shared_links_settled_without_merging(monkeypatch):
    # 300 segments each spread over the same 40 links (a spine layer): more entries than links
    # by far, so merging private parallel links (at most one entry per link) cannot make them
    # narrow; the solve does not count merged entries at all, and its rates are the vectorised
    # solver's. The 18-port NVLink segments of a GPU (test above) are still counted.
    import scipy.sparse as sp
    from fabricsim.flows import fluid_compiled
    calls = []
    real = fluid_compiled._merged_entries
    monkeypatch.setattr(fluid_compiled, "_merged_entries", lambda *a: calls.append(1) or real(*a))
    rng = np.random.default_rng(3)
    n_seg, n_links = 300, 40
    V = sp.csr_matrix((np.full(n_seg * n_links, 1.0 / n_links), np.tile(np.arange(n_links), n_seg),
                       np.arange(0, n_seg * n_links + 1, n_links)), shape=(n_seg, n_links))
    F = sp.csr_matrix((rng.uniform(0.5, 2.0, 600), (np.arange(600), rng.integers(0, n_seg, 600))),
                      shape=(600, n_seg))
    cap = rng.uniform(1.0, 3.0, n_links)
    sol = FluidProblem(F, V, cap).solve(method="compiled")
    assert not calls
    np.testing.assert_allclose(sol.rates, FluidProblem(F, V, cap).solve(method="vectorised").rates, rtol=1e-9)
    F2, V2, cap2, _ = ported_instance(1, n_flows=800, ports=18)
    FluidProblem(F2, V2, cap2).solve(method="compiled")
    assert calls


def _appended_run(seed, monkeypatch, incremental, n_flows=2400, ports=4, far=None, steps=14):
    """An engine-like sequence on ECMP-like rows (direct solves of a DirectImage): rows appended
    in batches at the end (``with_flows(extends=True)``), the fastest and some random flows
    ending, every solve warm from the last. Returns each solve's rates and the image."""
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_INCREMENTAL", incremental)
    monkeypatch.setattr(fluid_compiled, "_LONG", 0.0)          # (rows of any length)
    if far is not None:
        monkeypatch.setattr(fluid_compiled, "_FAR", far)
    F, V, cap, _ = ported_instance(seed, n_flows=n_flows, ports=ports)
    rng = np.random.default_rng(7000 + seed)
    n = F.shape[0]
    rows = n // 4
    prob = FluidProblem(F[:rows], V, cap)
    active = np.ones(rows, bool)
    earlier, r_gone = None, np.inf
    out = []
    for step in range(steps):
        if step % 3 != 2 and rows < n:
            new = min(n, rows + int(rng.integers(1, n // 8)))
            prob = prob.with_flows(F[:new], extends=True)
            active = np.concatenate([active, np.ones(new - rows, bool)])
            rows = new
        warm = None if earlier is None else (earlier, r_gone)
        sol = prob.solve(active=active, method="compiled", warm=warm)
        out.append(sol.rates.copy())
        alive = np.flatnonzero(active)
        r = sol.rates[alive]
        end = alive[np.argsort(-r, kind="stable")[:max(1, alive.size // 20)]]
        end = np.unique(np.concatenate([end, rng.choice(alive, max(1, alive.size // 15), replace=False)]))
        earlier = np.where(active, sol.rates, np.nan)
        r_gone = float(earlier[end].min())
        active[end] = False
    return out, prob._image, (F, V, cap, active)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ports", [3, 4])
@pytest.mark.parametrize("far", [None, 0.0])
@pytest.mark.parametrize("few", [None, 0.0, np.inf])
def test_kept_link_lists_give_the_rates_of_lists_built_every_solve(seed, ports, far, few, monkeypatch):
    # the same engine-like sequence solved with the link lists and sums kept between solves
    # (LinkLists, _inc_kernel) and with them built from every active row at each solve
    # (_kernel): the same rates within rounding at every solve (1/3 coefficients: the sums are
    # taken in another order), and the kept lists did serve most solves (far 0: the rows are
    # laid out after every solve, and the lists renumbered with them each time)
    # (few 0 / inf: the walk always over the kept lists / always over lists of the rows to fill)
    from fabricsim.flows import fluid_compiled
    if few is not None:
        monkeypatch.setattr(fluid_compiled, "_FEW", few)
    built, image, _ = _appended_run(seed, monkeypatch, False, ports=ports, far=far)
    assert image.lists is None
    kept, image, (F, V, cap, _a) = _appended_run(seed, monkeypatch, True, ports=ports, far=far)
    assert len(kept) == len(built)
    for a, b in zip(kept, built):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
    lists = image.lists
    assert isinstance(lists, fluid_compiled.LinkLists)
    assert lists.builds <= 2
    if far is not None:
        assert lists.relists >= len(kept) - 2


def test_kept_link_lists_against_the_vectorised_solver(monkeypatch):
    # the kept path is max-min fair on its own: its rates are the vectorised solver's and pass
    # the optimality check, solve after solve
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_INCREMENTAL", True)
    monkeypatch.setattr(fluid_compiled, "_LONG", 0.0)
    F, V, cap, _ = ported_instance(11, n_flows=1500, ports=3)
    rows, active, earlier, r_gone = 500, np.ones(500, bool), None, np.inf
    prob = FluidProblem(F[:rows], V, cap)
    rng = np.random.default_rng(3)
    for step in range(8):
        if step % 2:
            new = rows + 120
            prob = prob.with_flows(F[:new], extends=True)
            active = np.concatenate([active, np.ones(new - rows, bool)])
            rows = new
        sol = prob.solve(active=active, method="compiled", warm=None if earlier is None else (earlier, r_gone))
        vec = FluidProblem(F[:rows], V, cap).solve(active=active, method="vectorised")
        np.testing.assert_allclose(sol.rates, vec.rates, rtol=1e-9)
        assert check_max_min(F[:rows][active], V, cap, sol.rates[active]) == []
        alive = np.flatnonzero(active)
        end = rng.choice(alive, alive.size // 8, replace=False)
        earlier = np.where(active, sol.rates, np.nan)
        r_gone = float(earlier[end].min())
        active[end] = False
    assert prob._image.lists.builds < 8


def test_kept_link_lists_built_again_when_prev_is_not_the_last_solve(monkeypatch):
    # a warm start whose earlier rates are not those of the image's last solve (here: of the
    # solve before it) cannot use the kept sums: the lists are built again from the rows, and
    # the rates are still a cold solve's
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_INCREMENTAL", True)
    monkeypatch.setattr(fluid_compiled, "_LONG", 0.0)
    F, V, cap, _ = ported_instance(5, n_flows=1200)
    prob = FluidProblem(F, V, cap)
    active = np.ones(F.shape[0], bool)
    first = prob.solve(active=active, method="compiled", warm=(np.full(F.shape[0], np.nan), np.inf))
    end = np.argsort(first.rates)[:50]              # the slowest end: the others speed up
    active[end] = False
    e1 = first.rates.copy()
    second = prob.solve(active=active, method="compiled", warm=(e1, float(first.rates[end].min())))
    builds = prob._image.lists.builds
    assert not np.array_equal(second.rates[active], first.rates[active])
    end2 = np.argsort(np.where(active, second.rates, np.inf))[:50]
    active[end2] = False
    # stale: the first solve's rates, not the second's (a valid warm start from the first solve)
    r_gone = float(min(first.rates[end].min(), first.rates[end2].min()))
    third = prob.solve(active=active, method="compiled", warm=(e1, r_gone))
    assert prob._image.lists.builds == builds + 1
    monkeypatch.setattr(fluid_compiled, "_INCREMENTAL", False)
    cold = FluidProblem(F, V, cap).solve(active=active, method="compiled")
    np.testing.assert_allclose(third.rates, cold.rates, rtol=1e-9)


def test_kept_link_lists_repacked_without_ended_rows(monkeypatch):
    # lists with little room at the tail are packed again (dropping the rows that ended) rather
    # than built from the rows; the rates stay those of lists built every solve
    from fabricsim.flows import fluid_compiled
    monkeypatch.setattr(fluid_compiled, "_TAIL", 0.0)
    kept, image, _ = _appended_run(2, monkeypatch, True, n_flows=9000, ports=3, steps=16)
    assert image.lists.repacks >= 2
    built, _image, _ = _appended_run(2, monkeypatch, False, n_flows=9000, ports=3, steps=16)
    for a, b in zip(kept, built):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def test_kept_link_lists_only_for_long_rows(monkeypatch):
    # rows of fewer entries than _LONG on average are solved as before (lists built per solve)
    from fabricsim.flows import fluid_compiled
    _rates, image, _ = _appended_run(1, monkeypatch, True, n_flows=1200, steps=6)
    assert image.lists is not None
    monkeypatch.setattr(fluid_compiled, "_LONG", 1e9)
    F, V, cap, _ = ported_instance(1, n_flows=1200)
    prob = FluidProblem(F, V, cap)
    active = np.ones(F.shape[0], bool)
    first = prob.solve(active=active, method="compiled")
    prob.solve(active=active, method="compiled", warm=(first.rates, np.inf))
    assert isinstance(prob._image, fluid_compiled.DirectImage) and prob._image.lists is None


@pytest.mark.parametrize("seed", range(40))
def test_coefficients_at_rounding_level_never_break_a_solve(seed, monkeypatch):
    """Coefficients of 1e-17..3e-16 beside ones of 0.25..1 (a share a water-fill left at rounding
    level): a link's sum of unfrozen shares absorbs them and gives back exactly 0 when the large
    one freezes. Cold and warm solves, every way of keeping the links' sums: no error (it was a
    ZeroDivisionError in 6 of these 40), no NaN, no negative rate (it was -7e15). The engines keep
    such coefficients out (engine/balance.py drops those below 1e-12), so this is the solver's own
    robustness, not a rate anyone reads."""
    from fabricsim.flows import fluid_compiled
    mode = ["eager", "lazy", "direct", "whole"][seed % 4]
    monkeypatch.setattr(fluid_compiled, "_LAZY", float("inf") if mode in ("eager", "direct") else -1.0)
    monkeypatch.setattr(fluid_compiled, "_DIRECT", float("inf") if mode == "direct" else 0.0)
    monkeypatch.setattr(fluid_compiled, "_WHOLE", 0.0 if mode == "whole" else float("inf"))
    rng = np.random.default_rng(seed)
    n, s, L = 40, 15, 12
    F = sp.random(n, s, density=0.25, random_state=rng, format="csr")
    Vd = (rng.random((s, L)) < 0.3) * rng.choice([1.0, 0.5, 0.25], (s, L))
    tiny = (rng.random((s, L)) < 0.15) & (Vd == 0)
    V = sp.csr_matrix(np.where(tiny, rng.choice([2e-16, 1e-17, 3e-16], (s, L)), Vd))
    cap = rng.uniform(0.5, 5.0, L)
    prob = FluidProblem(F, V, cap)
    active = rng.random(n) < 0.6
    prev = prob.solve(active=active, method="compiled")
    earlier = np.where(active, prev.rates, np.nan)
    for _step in range(6):
        assert not np.isnan(prev.rates).any() and (prev.rates >= 0).all()
        alive = np.flatnonzero(active & np.isfinite(prev.rates))
        if alive.size < 3:
            break
        end = alive[np.argsort(-prev.rates[alive], kind="stable")[:2]]
        r_gone = float(earlier[end].min())
        active[end] = False
        idle = np.flatnonzero(~active)
        active[rng.choice(idle, min(idle.size, 3), replace=False)] = True
        prev = prob.solve(active=active, method="compiled", warm=(earlier, r_gone))
        earlier = np.where(active, prev.rates, np.nan)
