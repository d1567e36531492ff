"""Port quality as a switch ASIC measures it: coarse grades, refreshed periodically, combined with
the grades that the next switch advertises. One measure shared by ``adaptive`` (every packet) and
``flowlet`` (every new flowlet).

Model (parameters in :class:`QualityParams`, sources in docs/models.md "Routing"):

* **Local grade** of an egress port: its backlog ``q`` (bytes queued or on the wire) graded
  against ``queue_thresholds`` x ``queue_ref``: grade ``k`` = how many thresholds ``q`` has
  reached (htsim ``-ar_method queue``: 0/1/2/3 for < 5 % / < 10 % / < 20 % / >= 20 % of the
  queue's size). With ``metric: util`` the grade is the port's utilisation over the last
  completed ``util_window`` graded against ``util_thresholds`` (htsim ``bandwidth``: busy time
  over 30 us); ``queue_util`` orders by the queue grade, then the utilisation grade (htsim ``qb``).
* **Refresh**: a port's grade is re-evaluated at most once per ``refresh`` period (time is cut
  into periods ``[k refresh, (k+1) refresh)``; the first question in a period measures, later
  ones get the same answer), as htsim's ``BaseQueue::_update_period``.
* **Remote grade** (``remote: true``): a port towards another switch N also carries N's grade of
  the egress port N will use for the packet's destination (the best one if N has several), as
  Spectrum-4's "status notifications from neighbouring switches" and CONGA's congestion-to-leaf
  feedback. N measures each of its ports at most once per ``remote_period`` and its report of the
  period ``k`` reaches the upstream switches at ``(k+1) remote_period + remote_delay``; a switch
  uses the newest report that has reached it. The path grade is ``max(local, remote)`` (CONGA).
* **Choice**: uniform among the candidate ports of the best path grade. The draw is a
  counter-based hash of (seeded salt, queue pair, PSN, send time, packet kind, switch id), not a
  sequential random stream, so a choice does not depend on how many choices came before it.
* **Fluid limit** (:meth:`PortQuality.shares`, what ``weights()`` of ``adaptive`` and
  ``flowlet`` answer for the flow engine): a port that takes more than its share builds a backlog
  (or a utilisation) sooner than the others, drops a grade and is left out of the draw until the
  others catch up, so under sustained load the candidates stay at one grade and each carries
  bytes in proportion to its capacity towards the destination (:func:`balanced_shares`); with
  equal capacities, the uniform draw among tied ports itself.

Measurements are taken when a switch asks (every packet under load). A report for a period in
which nobody asked (no traffic towards that destination) is reconstructed from the port's last
measurement, drained at line rate since (``busy_until`` then, minus the time elapsed): it uses only
what was known then, and is exact when nothing was enqueued in between, an under-estimate
otherwise (docs/fidelity/routing.md).
"""
from __future__ import annotations

from bisect import bisect_right
from collections import deque
from typing import Literal

from pydantic import Field, field_validator

from ..config.types import PositiveSize, PositiveTime
from ..flows.identity import packet_draw
from .base import PolicyParams

PS_BITS = 8 * 10**12          # bits per byte x ps per second
MASK64 = (1 << 64) - 1


class QualityParams(PolicyParams):
    """Parameters of the port-quality measure (keys under ``routing:``)."""

    metric: Literal["queue", "util", "queue_util"] = Field(
        "queue", description="what a port's grade measures: backlog, utilisation, or backlog then "
                             "utilisation (htsim -ar_method queue / bandwidth / qb)")
    queue_thresholds: list[float] = Field(
        [0.05, 0.10, 0.20], description="backlog grade boundaries as fractions of queue_ref, "
                                        "increasing (htsim: 5/10/20 % of the queue's size)")
    queue_ref: PositiveSize = Field("2MiB", description="reference queue size for queue_thresholds "
                                                       "(htsim: the queue's size; 2 MiB = fabricsim's "
                                                       "default per-port buffer)")
    util_thresholds: list[float] = Field([0.15, 0.50], description="utilisation grade boundaries "
                                                                  "(htsim bandwidth metric: 15/50 %)")
    util_window: PositiveTime = Field("30us", description="utilisation measurement window (htsim: 30 us)")
    refresh: PositiveTime = Field("100ns", description="a port's grade is re-evaluated at most once "
                                                       "per this period (htsim: 0.1 us)")
    remote: bool = Field(True, description="combine each uplink's grade with the next switch's "
                                           "advertised grade of its port towards the destination")
    remote_ref: PositiveSize = Field("4MiB", description="reference queue size of advertised grades "
                                                     "(queue_thresholds x this): 4 MiB = twice queue_ref, so a "
                                                     "neighbour reports grade 1 from 10 % of a 2 MiB buffer; "
                                                     "reports as fine as the local grade make leaves herd "
                                                     "onto the same spines [EST, measured]")
    remote_period: PositiveTime = Field("1us", description="how often a switch measures the ports it "
                                                           "advertises [EST]")
    remote_delay: PositiveTime = Field("1us", description="from the end of a measurement period to "
                                                          "its report reaching the upstream switch [EST]")

    @field_validator("queue_thresholds", "util_thresholds")
    @classmethod
    def _increasing(cls, v):
        if not v:
            raise ValueError("got [] (allowed: at least one grade boundary; one list of positive, strictly "
                             "increasing fractions)")
        if any(x <= 0 for x in v) or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"got {v!r} (allowed: positive, strictly increasing fractions)")
        return v


def balanced_shares(capacity_bps) -> "np.ndarray":
    """Shares in proportion to each port's capacity towards the destination (``capacity_bps``;
    ``None``: all equal), uniform if none has any: the fluid limit of a pick that keeps the ports
    at one grade (module doc, "Fluid limit").

    >>> balanced_shares([400e9, 200e9, 200e9]).tolist(), balanced_shares([0.0, 0.0]).tolist()
    ([0.5, 0.25, 0.25], [0.5, 0.5])
    """
    import numpy as np
    caps = np.asarray(capacity_bps, dtype=np.float64)
    n = len(caps)
    total = caps.sum()
    return caps / total if total > 0 else np.full(n, 1.0 / n)


class PortQuality:
    """Graded port quality for one simulation (state per port, kept here, not on the ports).

    ``best(switch, ports, dst, now_ps)`` returns the list of candidate ports of the best grade,
    ``pick(switch, ports, pkt, now_ps)`` draws one of them. Both are the hot path of routing.
    """

    def __init__(self, params: QualityParams, salt: int):
        self.p = params
        self._salt = salt & MASK64
        self._refresh = params.refresh
        self._rper = params.remote_period
        self._rdel = params.remote_delay
        self._remote = params.remote
        self._use_q = params.metric in ("queue", "queue_util")
        self._use_u = params.metric in ("util", "queue_util")
        self._nu = len(params.util_thresholds) + 1
        self._groups: dict[int, list] = {}     # id(ports tuple) -> group record (see _compile)
        self._keep: list = []                  # the tuples, so their ids are never reused
        self._thr: dict[tuple, tuple] = {}     # (port rate, remote) -> grade boundaries in ps of serialisation
        self._n = 0                            # ports known; the lists below are indexed by Port.index
        self._ep: list[int] = []               # refresh period of the cached local grade
        self._gr: list[int] = []               # cached local grade
        self._um_t: list[int] = []             # utilisation window start (ps)
        self._um_b: list[int] = []             # tx_bytes at the window start
        self._ug: list[int] = []               # utilisation grade of the last completed window
        self._rkey: list = []                  # remote: (measured, newest arrived) period key of _rv
        self._rv: list[int] = []               # remote: grade as known upstream
        self._rh: list = []                    # remote: deque of (period, grade, busy_until) measurements

    # ------------------------------------------------------------------ per-port state
    def _grow(self, n):
        k = n - self._n
        for lst, v in ((self._ep, -1), (self._gr, 0), (self._um_t, 0), (self._um_b, 0), (self._ug, 0),
                       (self._rkey, -1), (self._rv, 0), (self._rh, None)):
            lst.extend([v] * k)
        self._n = n

    def thresholds_ps(self, rate_bps: int, remote: bool = False) -> tuple:
        """Backlog grade boundaries of a port of this rate, in ps of serialisation (a backlog of
        ``b`` bytes is ``b * 8e12 / rate`` ps): comparing ``busy_until - now`` needs no division.
        ``remote``: the boundaries of advertised grades (``remote_ref`` instead of ``queue_ref``)."""
        t = self._thr.get((rate_bps, remote))
        if t is None:
            ref = self.p.remote_ref if remote else self.p.queue_ref
            t = self._thr[(rate_bps, remote)] = tuple(int(f * ref * PS_BITS / rate_bps)
                                                      for f in self.p.queue_thresholds)
        return t

    def grade(self, port, now: int, remote: bool = False) -> int:
        """Grade of ``port`` measured at ``now`` (no caching): 0 is the best."""
        g = 0
        if self._use_q:
            q = port.busy_until - now
            g = bisect_right(self.thresholds_ps(port.rate, remote), q) if q > 0 else 0
        if self._use_u:
            i = port.index
            span = now - self._um_t[i]
            if span >= self.p.util_window:
                util = (port.tx_bytes - self._um_b[i]) * PS_BITS / (span * port.rate)
                self._ug[i] = bisect_right(self.p.util_thresholds, util) if util > 0 else 0
                self._um_t[i], self._um_b[i] = now, port.tx_bytes
            g = g * self._nu + self._ug[i]
        return g

    def _remote_grade(self, r, now: int, key: int) -> int:
        """The grade of port ``r`` (of the next switch) as known upstream at ``now``; ``key``
        identifies (measurement period, newest arrived period), for which the answer is cached."""
        i = r.index
        per = self._rper
        m = now // per                      # the current measurement period
        h = self._rh[i]
        if h is None:
            h = self._rh[i] = deque()
        if not h or h[-1][0] != m:          # first question in this period: the switch measures
            h.append((m, self.grade(r, now, True), r.busy_until))
        k = (now - self._rdel) // per - 1   # newest period whose report has arrived
        while len(h) > 1 and h[1][0] <= k:
            h.popleft()
        first = h[0]
        if first[0] == k:
            g = first[1]
        elif first[0] < k:                  # no measurement in period k: reconstruct it
            g = self._drained(r, first, k * per)
        else:
            g = 0                           # nothing reported yet
        self._rkey[i] = key
        self._rv[i] = g
        return g

    def _drained(self, port, meas, t: int) -> int:
        """Grade the port would have reported at ``t`` if nothing was enqueued on it after the
        measurement ``meas = (period, grade, busy_until)``: its backlog then, drained since.
        Uses only what was known at the measurement (causal); exact when nothing was enqueued."""
        q = meas[2] - t
        g = bisect_right(self.thresholds_ps(port.rate, True), q) if (q > 0 and self._use_q) else 0
        return g * self._nu + meas[1] % self._nu if self._use_u else g

    # ------------------------------------------------------------------ groups
    def _compile(self, switch, ports, dst):
        """Group record of one (switch, destination) candidate tuple: ``[refresh period of
        best, best list, [(port, index, thresholds_ps, remote index, remote ports)]]``; remote
        index is the index of the one port the next switch uses, -1 if there is none (a host or
        ``remote: false``) and -2 if it has several (then the best of ``remote ports`` counts)."""
        n = len(switch.engine.ports)           # port indices are their positions in this list
        if n > self._n:
            self._grow(n)
        cands = []
        for p in ports:
            rem = ()
            if self._remote:
                nxt = switch.engine.switches.get(p.peer)
                if nxt is not None:
                    route = nxt.route.get(dst) or nxt.lookup(dst)
                    rem = route[1]
            j = -1 if not rem else (rem[0].index if len(rem) == 1 else -2)
            cands.append((p, p.index, self.thresholds_ps(p.rate), j, rem))
        g = self._groups[id(ports)] = [-1, None, cands]
        self._keep.append(ports)
        return g

    def best(self, switch, ports, dst, now: int) -> list:
        """Candidate ports of the best path grade, max(local, remote), at ``now``."""
        g = self._groups.get(id(ports))
        if g is None:
            g = self._compile(switch, ports, dst)
        e = now // self._refresh
        if g[0] == e:
            return g[1]
        ep, gr = self._ep, self._gr
        use_u = self._use_u
        rkey, rv = self._rkey, self._rv
        per = self._rper
        m = now // per
        key = (m << 32) + m - (now - self._rdel) // per     # measured and arrived periods, one int
        best_g = 1 << 30
        best = []
        for p, i, thr, j, rem in g[2]:
            if ep[i] == e:
                lg = gr[i]
            else:
                if use_u:
                    lg = self.grade(p, now)
                else:
                    q = p.busy_until - now
                    lg = bisect_right(thr, q) if q > 0 else 0
                ep[i] = e
                gr[i] = lg
            if lg > best_g:
                continue                    # max(local, remote) cannot be the best
            if j >= 0:
                rg = rv[j] if rkey[j] == key else self._remote_grade(rem[0], now, key)
                if rg > lg:
                    lg = rg
            elif j == -2:
                rg = min((rv[r.index] if rkey[r.index] == key else self._remote_grade(r, now, key))
                         for r in rem)
                if rg > lg:
                    lg = rg
            if lg < best_g:
                best_g = lg
                best = [p]
            elif lg == best_g:
                best.append(p)
        g[0] = e
        g[1] = best
        return best

    def shares(self, ports, capacity_bps=None) -> list[float]:
        """The long-run share of a flow's bytes :meth:`pick` gives each of ``ports`` under
        sustained load: :func:`balanced_shares` of their capacities towards the destination
        (``None``: equal, so uniform), as the module doc's "Fluid limit" argues; checked against
        the packet engine by tests/test_pinned.py::test_packet_byte_shares_follow_weights."""
        return balanced_shares([1.0] * len(ports) if capacity_bps is None else capacity_bps).tolist()

    def pick(self, switch, ports, pkt, now: int):
        """One port of the best grade, drawn uniformly by a counter-based hash of the packet."""
        best = self.best(switch, ports, pkt.dst, now)
        n = len(best)
        if n == 1:
            return best[0]
        return best[packet_draw(self._salt, pkt, switch.id) % n]
