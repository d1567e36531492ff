"""ConnectionTable.open_many (the flow engine's batch opening) against the documented rule of
:class:`~fabricsim.flows.identity.ConnectionTable`, implemented here independently message by
message (fresh queue pairs for ``conn < 0``, persistent connections keyed ``(conn, src, dst)``
opening ``qps`` queue pairs when first used), on randomised batches: repeated keys, messages
smaller than their queue-pair count (parts of 0 bytes), batches in several calls."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricsim.flows.identity import (MASK64, ConnectionTable, five_tuple_hash, mix64, queue_pair_tuple,
                                      queue_pair_tuples, split_bytes)


class ReferenceTable:
    """The rule, one message at a time, with lists of tuples (the table before open_many)."""

    def __init__(self, salt):
        self.salt, self.next_uid, self.conns = salt, 0, {}

    def _new(self, src, dst):
        uid = self.next_uid
        self.next_uid += 1
        return (uid,) + reference_tuple(self.salt, src, dst, uid)

    def open(self, src, dst, size, qps, conn):
        if conn < 0:
            return [self._new(src, dst) + (b,) for b in split_bytes(size, qps) if b]
        tuples = self.conns.get((conn, src, dst))
        if tuples is None:
            tuples = self.conns[(conn, src, dst)] = [self._new(src, dst) for _ in range(qps)]
        return [t + (b,) for t, b in zip(tuples, split_bytes(size, len(tuples))) if b]


def reference_tuple(salt, src, dst, uid):
    """queue_pair_tuple written out in Python ints (the formula of docs/architecture.md)."""
    sport = 49152 + (uid & 0x3FFF)
    h = mix64(salt ^ src)
    h = mix64(h ^ ((dst * 0x9E3779B97F4A7C15) & MASK64))
    h = mix64(h ^ (((sport ^ (uid >> 14) * 7919) << 16) & MASK64) ^ 4791)
    return sport, mix64(h ^ 17)


def columns_per_message(q, m):
    rows = list(zip(*(c.tolist() for c in q)))
    return [[r[1:] for r in rows if r[0] == j] for j in range(m)]


message = st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 40), st.integers(1, 6),
                    st.integers(-1, 2))
batches = st.lists(st.lists(message, max_size=30), min_size=1, max_size=4)


@settings(max_examples=300, deadline=None)
@given(batches=batches, salt=st.integers(0, MASK64))
def test_open_many_equals_the_rule_message_by_message(batches, salt):
    got, ref = ConnectionTable(salt), ReferenceTable(salt)
    for batch in batches:
        want = [ref.open(*msg) for msg in batch]
        cols = list(zip(*batch)) if batch else [[]] * 5
        q = got.open_many(*cols)
        assert q.hash.dtype == np.uint64 and all(c.dtype == np.int64 for c in (q.msg, q.uid, q.sport, q.size_bytes))
        assert columns_per_message(q, len(batch)) == want
        assert np.all(np.diff(q.msg) >= 0) and np.all(q.size_bytes > 0)
        assert got.next_uid == ref.next_uid


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(message, max_size=30), salt=st.integers(0, MASK64), cut=st.integers(0, 30))
def test_open_many_equals_open_and_any_cut_of_the_batch(batch, salt, cut):
    """One batch, two batches cut anywhere, or one message at a time: the same queue pairs."""
    whole, halves, single = ConnectionTable(salt), ConnectionTable(salt), ConnectionTable(salt)
    a = columns_per_message(whole.open_many(*(zip(*batch) if batch else [[]] * 5)), len(batch))
    b = []
    for part in (batch[:cut], batch[cut:]):
        b += columns_per_message(halves.open_many(*(zip(*part) if part else [[]] * 5)), len(part))
    c = [single.open(*msg) for msg in batch]
    assert a == b == c


def test_connection_opened_small_keeps_its_count_and_zero_parts_are_left_out():
    t = ConnectionTable(3)
    q = t.open_many([0, 0, 0], [1, 1, 1], [2, 9, 0], [4, 1, 2], [7, 7, -1])
    # the first message opens 4 queue pairs (uids 0-3) but uses 2; the second is split over 4;
    # the empty fresh message opens none
    assert q.msg.tolist() == [0, 0, 1, 1, 1, 1] and q.uid.tolist() == [0, 1, 0, 1, 2, 3]
    assert q.size_bytes.tolist() == [1, 1] + split_bytes(9, 4) and t.next_uid == 4


@given(salt=st.integers(0, MASK64), src=st.integers(0, 2**40), dst=st.integers(0, 2**40),
       uid=st.integers(0, 2**40))
def test_queue_pair_tuples_equal_the_scalar_formula(salt, src, dst, uid):
    sport, h = queue_pair_tuples(salt, [src], [dst], [uid])
    assert (int(sport[0]), int(h[0])) == queue_pair_tuple(salt, src, dst, uid) == reference_tuple(salt, src, dst, uid)
    assert five_tuple_hash(salt, src, dst, 49152, 4791, 17) == reference_tuple(salt, src, dst, 0)[1]


call = st.one_of(st.tuples(st.just("open"), message),
                 st.tuples(st.just("many"), st.lists(message, max_size=12)))


@settings(max_examples=200, deadline=None)
@given(calls=st.lists(call, max_size=12), salt=st.integers(0, MASK64))
def test_open_and_open_many_interleaved_on_one_table_follow_the_rule(calls, salt):
    """open() (the packet engine's per-message path) and open_many() share one table: a
    connection opened by either is reused by the other, and uids run on across both."""
    got, ref = ConnectionTable(salt), ReferenceTable(salt)
    for kind, arg in calls:
        if kind == "open":
            assert got.open(*arg) == ref.open(*arg)
        else:
            want = [ref.open(*msg) for msg in arg]
            assert columns_per_message(got.open_many(*(zip(*arg) if arg else [[]] * 5)), len(arg)) == want
        assert got.next_uid == ref.next_uid


def test_many_connections_opened_one_at_a_time_keep_their_uids():
    """The connection columns grow as connections are added one by one (the packet engine):
    every connection keeps its first uid and count."""
    t = ConnectionTable(1)
    firsts = [t.open(0, 1, 8, 2, conn=c)[0][0] for c in range(1000)]
    assert firsts == list(range(0, 2000, 2))
    assert [t.open(0, 1, 8, 9, conn=c)[1][0] for c in range(0, 1000, 97)] == [2 * c + 1 for c in range(0, 1000, 97)]
