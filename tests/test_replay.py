"""flows/replay.py without an engine: release times, compute gaps, failure propagation, and the
posting-order FIFO, deferred in-order completion and error flush of persistent connections."""
import doctest

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fabricsim.flows import replay as replay_mod
from fabricsim.flows.message import Message
from fabricsim.flows.replay import Connections, Replay
from fabricsim.flows.table import MessageTable


def M(i, src=0, dst=1, **kw):
    return Message(i, src, dst, 100, **kw)


def test_doctests():
    assert doctest.testmod(replay_mod).failed == 0


def test_roots_are_released_at_their_start_in_row_order():
    r = Replay([M(0, start_ps=50), M(1, start_ps=10), M(2, deps=(0,)), M(3)])
    assert r.initial() == [(50, 0), (10, 1), (0, 3)]
    assert all(type(t) is int and type(i) is int for t, i in r.initial())


def test_chain_and_fan_in_release_after_the_last_dependency_gap_and_start():
    r = Replay([M(0), M(1, deps=(0,), gap_ps=10), M(2, deps=(0,), start_ps=100),
                M(3, deps=(1, 2), gap_ps=5), M(4, deps=(3,))])
    assert r.initial() == [(0, 0)]
    assert r.completed(0, 20) == [(30, 1), (100, 2)]       # gap after t; not before start_ps
    assert r.completed(2, 150) == []                        # row 3 still waits for row 1
    assert r.completed(1, 200) == [(205, 3)]                # the last dependency releases it
    assert r.completed(3, 300) == [(300, 4)]


def test_rows_not_ids_and_dependents_in_row_order():
    msgs = [M(10), M(30, deps=(10,), gap_ps=1), M(20, deps=(10,), gap_ps=2)]
    for messages in (msgs, MessageTable.from_messages(msgs)):
        r = Replay(messages)
        assert r.completed(0, 5) == [(6, 1), (7, 2)]


def test_gpu_compute_shares_a_job_and_queues_jobs_on_one_gpu():
    msgs = [M(0, src=9), M(1, src=0, deps=(0,), gap_ps=100), M(2, src=0, deps=(0,), gap_ps=100),
            M(3, src=0, deps=(0,), gap_ps=50), M(4, src=1, deps=(0,), gap_ps=50), M(5, src=0, deps=(0,))]
    gpu = Replay(msgs, compute="gpu")
    # rows 1 and 2: one job (same sender, deps, gap); row 3 a second job on GPU 0 after it;
    # row 4 on GPU 1 runs alongside; row 5 has no gap, no job
    assert gpu.completed(0, 10) == [(110, 1), (110, 2), (160, 3), (60, 4), (10, 5)]
    assert gpu.gpu_busy == {0: 150, 1: 50}
    gaps = Replay(msgs)
    assert gaps.completed(0, 10) == [(110, 1), (110, 2), (60, 3), (60, 4), (10, 5)]
    assert gaps.gpu_busy == {}
    with pytest.raises(ValueError):
        Replay(msgs, compute="cpu")


def test_gpu_job_after_the_gpu_went_idle_starts_at_once_and_a_later_job_queues():
    msgs = [M(0), M(1), M(2, src=0, deps=(0,), gap_ps=100), M(3, src=0, deps=(1,), gap_ps=100)]
    r = Replay(msgs, compute="gpu")
    assert r.completed(0, 500) == [(600, 2)]
    assert r.completed(1, 550) == [(700, 3)]     # waits for the job ending at 600
    assert r.gpu_busy == {0: 200}
    r = Replay(msgs, compute="gpu")
    assert r.completed(1, 0) == [(100, 3)]
    assert r.completed(0, 1000) == [(1100, 2)]   # the GPU is idle again: no wait


def test_failure_propagates_transitively_depth_first_and_once():
    msgs = [M(0), M(1, deps=(0,)), M(2, deps=(1,)), M(3, deps=(0,)), M(4, deps=(3,)), M(5, deps=(1, 6)),
            M(6), M(7, deps=(6,))]
    r = Replay(msgs)
    assert r.failed(0) == [1, 2, 5, 3, 4]
    assert r.failed(6) == [7]                     # row 5 already failed: not again
    # a failed dependency never releases: row 6 completing releases nothing
    r = Replay(msgs)
    assert r.completed(6, 10) == [(10, 7)]
    assert r.failed(0) == [1, 2, 5, 3, 4]
    r = Replay(msgs)
    r.completed(0, 1)
    r.completed(1, 2)
    assert r.failed(3) == [4]                     # rows that completed, or do not depend on it, are spared
    assert r.completed(6, 3) == [(3, 5), (3, 7)]


def test_connection_runs_its_rows_one_at_a_time_in_posting_order():
    c = Connections([M(i, conn=7) for i in range(4)] + [M(4, src=1, dst=0, conn=7), M(5, conn=8), M(6)])
    assert [c.post(i) for i in (0, 2, 1)] == ["start", "wait", "wait"]   # posting order, not row order
    assert [c.post(i) for i in (4, 5, 6)] == ["start"] * 3                # other connections, fresh queue pairs
    assert c.sent(0) == [2]
    assert c.sent(0) == []                       # once per row
    assert c.sent(2) == [1]
    assert c.sent(1) == []                       # nothing waiting: the connection is idle
    assert c.post(3) == "start"
    assert c.key(3) == (7, 0, 1) and c.key(6) is None
    assert c.done(6) == ([], [6], []) and c.sent(6) == []


def test_done_hands_the_connection_on_when_sent_was_not_reported():
    c = Connections([M(i, conn=0) for i in range(3)])
    c.post(0), c.post(1), c.post(2)
    assert c.done(0) == ([1], [0], [])
    assert c.sent(0) == []
    assert c.done(1) == ([2], [1], [])


def test_deferred_rows_complete_in_order_with_their_predecessor():
    c = Connections([M(i, conn=0) for i in range(4)])
    for i in range(4):
        c.post(i)
    assert c.sent(0) == [1] and c.sent(1) == [2] and c.sent(2) == [3]
    assert c.done(2) == ([], [], [])
    assert c.done(1) == ([], [], [])
    assert c.deferred(1) and c.deferred(2) and not c.deferred(0)
    assert c.done(0) == ([], [0, 1, 2], [])      # at the same instant, in posting order
    assert not c.deferred(1)
    assert c.done(3) == ([], [3], [])


def test_a_failure_flushes_later_rows_started_deferred_or_queued_and_spares_earlier_ones():
    c = Connections([M(i, conn=0) for i in range(6)])
    for i in range(4):
        c.post(i)
    assert c.sent(0) == [1]
    # row 1 fails before its last byte was reported: row 2 starts (its turn) and is flushed, with queued row 3
    assert c.done(1, failed=True) == ([2], [1], [2, 3])
    assert c.post(4) == "error"                  # the connection is in error from now on
    assert c.sent(2) == []
    assert c.done(0) == ([], [0], [])            # the earlier row runs on and completes


def test_a_failure_flushes_a_deferred_row():
    c = Connections([M(i, conn=0) for i in range(3)])
    for i in range(3):
        c.post(i)
    assert c.sent(0) == [1]
    assert c.done(1) == ([2], [], [])            # deferred behind row 0
    assert c.done(0, failed=True) == ([], [0], [1, 2])
    assert not c.deferred(1)
    assert c.sent(1) == []


def one_released(replay, row, released):
    """The released ``(release_ps, dependent)`` pairs among ``released`` that ``row`` released
    (dependents of ``row``)."""
    ptr, deps = replay._dep_ptr, replay._dependents
    mine = set(deps[ptr[row]:ptr[row + 1]].tolist())
    return [x for x in released if x[1] in mine]


def test_min_gap_is_the_smallest_gap_among_a_rows_dependents():
    r = Replay([M(0), M(1, deps=(0,), gap_ps=7), M(2, deps=(0, 1), gap_ps=3), M(3)])
    assert r.min_gap().tolist() == [3, 3, 2**62, 2**62]


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_completed_many_gives_what_completed_gives_row_by_row(data):
    # a random DAG (deps on earlier rows), completed in random batches in a random valid order:
    # the batched call releases the same rows at the same times in the same order, and leaves
    # the same pending counts
    n = data.draw(st.integers(2, 30))
    msgs = []
    for i in range(n):
        deps = data.draw(st.lists(st.integers(0, i - 1), unique=True, max_size=min(i, 4))) if i else []
        msgs.append(M(i, deps=tuple(deps), gap_ps=data.draw(st.integers(0, 3)), start_ps=data.draw(st.integers(0, 40))))
    one, many = Replay(msgs), Replay(msgs)
    ready = [i for _t, i in one.initial()]
    t = 0
    while ready:
        k = data.draw(st.integers(1, len(ready)))
        batch, ready = ready[:k], ready[k:]
        ts = sorted(t + data.draw(st.integers(0, 5)) for _ in batch)   # one time per row, in order
        t = max(ts)
        want = [x for r, tr in zip(batch, ts) for x in one.completed(r, tr)]
        rel, rows = many.completed_many(batch, ts[0] if len(set(ts)) == 1 else ts)
        gap = many.min_gap()
        assert all(rr >= tr + gap[r] for r, tr in zip(batch, ts) for rr, _d in one_released(one, r, want))
        assert list(zip(rel.tolist(), rows.tolist())) == want
        assert many._pending.tolist() == one._pending.tolist()
        ready += rows.tolist()


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_batched_connection_calls_equal_the_calls_one_by_one(data):
    # rows on a few persistent connections (and fresh queue pairs), posted, sent and done in
    # random batches, and now and then one failing (the same call on both): post_many,
    # sent_many and done_many answer as post, sent and done called row by row, and leave the
    # same state, after a connection's error too
    n = data.draw(st.integers(1, 24))
    msgs = [M(i, src=data.draw(st.integers(0, 2)), dst=3, conn=data.draw(st.sampled_from([-1, 0, 1]))) for i in range(n)]
    one, many = Connections(msgs), Connections(msgs)
    unposted, started, sent = list(range(n)), [], []

    def state(c):
        return (c._wait.tolist(), {k: list(v) for k, v in c._wait_q.items()},
                c._open1.tolist(), {k: list(v) for k, v in c._open_q.items()},
                c._err.tolist(), bytes(c._handed), sorted(c._deferred))

    while unposted or started or sent:
        op = data.draw(st.sampled_from([x for x, ok in (("post", unposted), ("sent", started), ("done", sent),
                                                        ("fail", sent)) if ok]))
        if op == "fail":
            r = data.draw(st.sampled_from(sent))
            got = one.done(r, failed=True)
            assert many.done(r, failed=True) == got
            s, f, flush = got
            gone = set(f) | set(flush) | {r}
            sent[:] = [x for x in sent if x not in gone]
            started[:] = [x for x in started + s if x not in gone]
            assert state(many) == state(one)
            continue
        pool = {"post": unposted, "sent": started, "done": sent}[op]
        batch = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
        if op == "post":
            want = [one.post(r) == "start" for r in batch]
            assert many.post_many(batch).tolist() == want
            started += [r for r, s in zip(batch, want) if s]
            unposted[:] = [r for r in unposted if r not in batch]
            # a row that waits starts when an earlier one is sent: tracked through sent below
        elif op == "sent":
            pairs = [(r, x) for r in batch for x in one.sent(r)]
            assert many.sent_many(batch) == pairs
            want = [x for _r, x in pairs]
            started[:] = [r for r in started if r not in batch] + want
            sent += batch
        else:
            want_s, want_f = [], []
            for k, r in enumerate(batch):
                s, f, _ = one.done(r)
                want_s += [(k, x) for x in s]
                want_f += [(k, x) for x in f]
            assert many.done_many(batch) == (want_s, want_f)
            want_s = [x for _k, x in want_s]
            sent[:] = [r for r in sent if r not in batch]
            started[:] = [r for r in started if r not in want_s] + want_s
        assert state(many) == state(one)


def test_finishes_alone_says_when_done_gives_only_the_row():
    c = Connections([M(0, conn=1), M(1, conn=1), M(2)])
    assert c.post(0) == "start" and c.post(1) == "wait" and c.post(2) == "start"
    assert c.finishes_alone(2)                    # a fresh queue pair
    assert not c.finishes_alone(0)                # not yet handed on: done would start row 1
    assert c.sent(0) == [1]
    assert not c.finishes_alone(0) and not c.finishes_alone(1)    # two rows open on the connection
    assert c.done(1) == ([], [], [])              # deferred behind row 0
    assert not c.finishes_alone(0)                # would complete row 1 with it
    assert c.done(0) == ([], [0, 1], [])


def test_separable_when_no_connection_is_posted_to_and_completing():
    c = Connections([M(0, conn=1), M(1, conn=1), M(2, conn=2), M(3, conn=3), M(4)])
    assert [c.post(i) for i in (0, 2)] == ["start", "start"]
    assert c.sent(0) == [] and c.sent(2) == []
    assert c.separable([3, 4], [0, 2])            # other connections, a fresh queue pair
    assert not c.separable([1], [0])              # row 1 posts on row 0's connection
    assert c.post(4) == "start"
    assert c.separable([], [4])                   # conn < 0 finishes alone
    assert c.post(3) == "start"
    assert not c.separable([], [3])               # not handed on yet: done would hand it


def test_the_compiled_count_down_equals_the_numpy_reference():
    """flows.replay.released and its numba twin: the same mask and the same counts, on batches
    with repeated dependents, rows released twice over and counts run below zero."""
    pytest.importorskip("numba")
    from fabricsim.flows.replay import released
    from fabricsim.flows.replay_compiled import released as compiled
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 300):
        for _ in range(40):
            pending = rng.integers(0, 4, size=max(n, 1))
            deps = rng.integers(0, max(n, 1), size=rng.integers(0, 3 * n + 1))
            a, b = pending.copy(), pending.copy()
            m1, m2 = released(deps, a), compiled(deps, b)
            assert m1.tolist() == m2.tolist() and a.tolist() == b.tolist()
            # the entry that brings a row to 0 is its pending-th occurrence
            for d in np.unique(deps[m1]):
                first = np.flatnonzero(deps == d)[pending[d] - 1]
                assert m1[first] and m1[deps == d].sum() == 1
