"""What an engine records while it runs: message completions, packet latencies, goodput.

Message rows are streamed to ``messages.partial.csv`` in the results folder as they finish
(flushed every few hundred rows and at the end), so an interrupted run keeps what it finished.

The run figures that need "payload delivered so far" at an instant (at the last release, the
last first arrival, the first completion) read :attr:`Recorder.delivered_total`, which the packet
engine's receivers keep up to date, or, if an engine sets :attr:`Recorder.delivered_by` (the flow
engine, which knows its deliveries as a series), ask it for that instant only when the figure
changes.
"""
from __future__ import annotations

import csv

import numpy as np

from ..engine import interface
from ..errors import SimulationError
from .histogram import LogHistogram

#: the messages table's core columns, in order (declared in :mod:`fabricsim.engine.interface`)
MESSAGE_COLUMNS = list(interface.MESSAGE_COLUMNS)
#: transport statistics per message (declared there too; definitions in docs/metrics.md)
TRANSPORT_COLUMNS = list(interface.TRANSPORT_COLUMNS)
ALL_MESSAGE_COLUMNS = MESSAGE_COLUMNS + TRANSPORT_COLUMNS
NO_TRANSPORT = (None,) * len(TRANSPORT_COLUMNS)
_NO_TRANSPORT_CSV = [""] * len(TRANSPORT_COLUMNS)
_END, _COMPLETED = MESSAGE_COLUMNS.index("end_ps"), MESSAGE_COLUMNS.index("completed")


def hist_percentile(hist: dict, q: float) -> int:
    """Smallest value v of a {value: count} histogram with at least q % of the counts <= v (0 if empty).

    >>> hist_percentile({1: 98, 7: 2}, 50), hist_percentile({1: 98, 7: 2}, 99)
    (1, 7)
    """
    n = sum(hist.values())
    if not n:
        return 0
    need = q / 100 * n
    acc = 0
    for v in sorted(hist):
        acc += hist[v]
        if acc >= need:
            return v
    return max(hist)  # pragma: no cover - rounding


def transport_row(st) -> tuple:
    """The TRANSPORT_COLUMNS values of a MessageState."""
    rb = st.rtx_bytes
    h = st.reorder_hist
    rx = st.rx_units
    # (most messages resend nothing and arrive in order: their empty dicts skip the sums, 0 each)
    if rb:
        rtx, sack, timeout, nak = sum(rb.values()), rb.get("sack", 0), rb.get("timeout", 0), rb.get("nak", 0)
    else:
        rtx = sack = timeout = nak = 0
    if h:
        p50, p99, most = hist_percentile(h, 50), hist_percentile(h, 99), max(h)
    else:
        p50 = p99 = most = 0
    return (rtx, sack, timeout, nak, st.dup_bytes, rx, (st.ooo_units / rx) if rx else 0.0, p50, p99, most,
            st.peak_hold, (st.reorder_wait_ps / rx) if rx else 0.0, st.reorder_wait_max_ps, st.ecn_marked, st.cnps,
            st.naks, st.overflow_bytes, st.discarded_bytes)


class Recorder:
    def __init__(self, latency_rel_error: float = 0.01, goodput_bin_ps: int = 10_000_000, stream_path=None):
        self.latency = LogHistogram(latency_rel_error)
        self.goodput: list[int] = []          # delivered payload bytes per bin
        self.goodput_bin_ps = goodput_bin_ps
        self.rows: list[tuple] = []
        self.first_release = None
        self.last_release = None
        self.first_end = None
        self.delivered_total = 0              # payload bytes delivered so far (receivers add)
        self.delivered_at_last_release = 0
        self.delivered_at_first_end = None
        self.last_first_arrival = None
        self.delivered_at_last_first_arrival = 0
        #: ``t -> payload delivered by t`` from an engine that computes it on demand (else None:
        #: :attr:`delivered_total` is read)
        self.delivered_by = None
        self._fh = None
        self._writer = None
        self.hists: list = []                 # (src, dst, reorder histogram) per message, for per-NIC tables
        self._states: list = []               # the MessageState of each row, for refresh()
        self._keep = True                     # keep each row (False: streamed only; see hand_over())
        self._rebuilt = False                 # rows rebuilt by refresh() at the end (see rows_rebuilt_at_end())
        self._frame = None
        if stream_path is not None:
            self._fh = open(stream_path, "w", newline="")
            self._writer = csv.writer(self._fh)
            self._writer.writerow(ALL_MESSAGE_COLUMNS)
        self._unflushed = 0                   # rows written since the last flush

    def _delivered(self, t) -> int:
        return self.delivered_total if self.delivered_by is None else self.delivered_by(t)

    def on_release(self, st, t):
        if self.first_release is None or t < self.first_release:
            self.first_release = t
        if self.last_release is None or t >= self.last_release:
            self.last_release = t
            self.delivered_at_last_release = self._delivered(t)

    def on_first_arrival(self, st, t):
        """The first payload of a message reached its receiver (called once per message, or once
        for the latest of several arriving together)."""
        self.last_first_arrival = t
        self.delivered_at_last_first_arrival = self._delivered(t)

    def _on_end(self, end):
        """A message completed at ``end``: the first completion and what was delivered by then."""
        if self.first_end is None or end < self.first_end:
            self.first_end = end
            self.delivered_at_first_end = self._delivered(end)

    def on_message(self, st):
        """A message ended (completed or not): its row, as it stands now, is added and streamed."""
        if st.done and not st.reason:
            self._on_end(st.end)
        # (a row nobody reads before refresh() rebuilds it is not made twice)
        row = None if self._rebuilt and self._writer is None else self._row(st)
        if self._keep:
            # (an engine that models no transport has no reorder histogram: its messages add none)
            self.hists.append((st.msg.src, st.msg.dst, st.reorder_hist if hasattr(st, "rtx_bytes") else {}))
            self.rows.append(row)
            self._states.append(st)
        if self._writer is not None:
            self._stream([["" if v is None else v for v in row]])

    def on_messages(self, rows: list[tuple]):
        """Messages that ended (completed or not), from an engine that keeps its figures as columns
        (:meth:`stream_only`, no transport figures): their :data:`MESSAGE_COLUMNS` values, in the
        order they ended; streamed in one write (the engine hands the table over at the end:
        :meth:`hand_over`)."""
        self.on_ended(np.array([row[_END] for row in rows if row[_COMPLETED]], dtype=np.int64), lambda: rows)

    def on_ended(self, completed_ends: np.ndarray, rows):
        """:meth:`on_messages` in columns: the end times of the messages that completed among
        them, and ``rows()`` giving their :data:`MESSAGE_COLUMNS` tuples, called only when they
        are streamed to a file (tuples for a million messages cost seconds)."""
        if self._keep:
            raise SimulationError("Recorder.on_messages keeps no rows: call stream_only() first and "
                                  "hand_over() the messages table at the end")
        if len(completed_ends):
            # (as one _on_end per row: the first of the smallest end sets the figures, all in
            # the engine's present state)
            end = int(completed_ends.min())
            if self.first_end is None or end < self.first_end:
                self._on_end(end)
        if self._writer is not None:
            self._stream([["" if v is None else v for v in row] + _NO_TRANSPORT_CSV for row in rows()])

    def _stream(self, rows: list):
        self._writer.writerows(rows)
        self._unflushed += len(rows)
        if self._unflushed >= 256:
            self._fh.flush()
            self._unflushed = 0

    @staticmethod
    def _row(st) -> tuple:
        m = st.msg
        completed = st.done and not st.reason
        end = st.end if completed else None
        row = (m.id, m.src, m.dst, m.size_bytes, m.qps, m.start_ps, st.release, end,
               (end - st.release) if completed else None, st.delivered, st.dropped, completed, st.reason)
        # an engine that models no transport (the flow engine) leaves those columns empty (NA)
        return row + (transport_row(st) if hasattr(st, "rtx_bytes") else NO_TRANSPORT)

    def rows_rebuilt_at_end(self):
        """The engine calls :meth:`refresh` at the end of every run that builds a table (the packet
        engine does): a row not streamed to a file is then made once, by :meth:`refresh`, instead
        of also when its message ends (a 1,024-GPU all-to-all's million rows, 13 us each)."""
        self._rebuilt = True

    @property
    def rows_at_message_end(self) -> bool:
        """Whether :meth:`on_message` makes the message's row when it is called (to stream it, or
        to keep it as it stands): then the message's counters must be as they stood at its end;
        else (:meth:`rows_rebuilt_at_end`, nothing streamed) only its end time is read now."""
        return not self._rebuilt or self._writer is not None

    def stream_only(self):
        """Rows from now on are streamed to ``messages.partial.csv`` but not kept: the engine hands
        the whole table over at the end (:meth:`hand_over`), as columns (a million messages as
        tuples cost about 1 GB)."""
        self._keep = False

    def hand_over(self, frame):
        """The messages table (a DataFrame with :data:`ALL_MESSAGE_COLUMNS`), from an engine that
        keeps its per-message figures as columns."""
        self._frame = frame

    def frame(self):
        """The messages table: what the engine handed over, or the kept rows."""
        import pandas as pd
        if self._frame is not None:
            return self._frame
        return pd.DataFrame(self.rows, columns=ALL_MESSAGE_COLUMNS)

    def refresh(self):
        """Rebuild every row from its message's counters as they are now (called at the run's
        end): a message's transport keeps going after its completion (resends still queued, their
        drops, duplicates), and the final table must add up to the run totals. The streamed
        ``messages.partial.csv`` keeps the rows as they were when each message ended."""
        self.rows = [self._row(st) for st in self._states]

    def close(self):
        if self._fh is not None:
            self._fh.close()
            self._fh = None
