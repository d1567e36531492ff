"""Discrete-event kernels: integer-picosecond time and an ordered agenda of callbacks.

A kernel owns the clock and the agenda and nothing else (no global state: two simulations can
run side by side in one process). Callbacks are ``fn(time_ps, arg)``; events at the same time
run in the order they were scheduled (FIFO), which makes runs deterministic.

Two kernels share this contract:

* ``schedule(time_ps, fn, arg)``: put ``fn(time_ps, arg)`` on the agenda.
* ``seq`` and ``push(entry)``: the low-level form of ``schedule`` for hot paths. An agenda entry
  is the tuple ``(time_ps, next(kernel.seq), fn, arg)``; events run in ``(time_ps, seq)`` order.
  A caller may build an entry now and ``push`` it later (the packet engine keeps each port's
  later arrivals off the agenda until the earlier ones have run): it still runs in the place its
  ``seq`` gave it, exactly as if it had been scheduled when the entry was built.

* :class:`HeapKernel` (default): a plain ``heapq`` agenda. Chosen after measuring SimPy's per-event
  cost as the bottleneck of the per-packet datapath (see benchmarks/README.md).
* :class:`SimpyKernel`: the same contract on a :class:`simpy.Environment`, for process-style
  logic (workload replay) and as a cross-check: both kernels give identical results.

>>> k = HeapKernel()
>>> seen = []
>>> k.schedule(5, lambda t, a: seen.append((t, a)), "b")
>>> k.schedule(2, lambda t, a: seen.append((t, a)), "a")
>>> k.run(until_ps=10)
'drained'
>>> seen
[(2, 'a'), (5, 'b')]
"""
from __future__ import annotations

from functools import partial
from heapq import heappop, heappush
from itertools import count
from typing import Any, Callable

Callback = Callable[[int, Any], None]


class HeapKernel:
    """Event agenda on a binary heap of ``(time_ps, seq, fn, arg)`` tuples."""

    name = "heap"

    def __init__(self):
        self.now = 0
        self.events = 0
        self._heap: list = []
        self.seq = count()
        # push(entry): a C-level partial, as cheap to call from a callback as heappush itself
        self.push = partial(heappush, self._heap)
        self._stop = False

    def schedule(self, time_ps: int, fn: Callback, arg: Any = None) -> None:
        """Run ``fn(time_ps, arg)`` at absolute time ``time_ps`` (>= now)."""
        heappush(self._heap, (time_ps, next(self.seq), fn, arg))

    def stop(self) -> None:
        """Make :meth:`run` return ``"stopped"`` as soon as the current event has finished.

        A sentinel entry at time -1 goes to the head of the agenda, so the very next pop ends the
        run, whatever the callback that called ``stop()`` schedules afterwards; the loop itself
        pays nothing per event for this.
        """
        if not self._stop:
            self._stop = True
            self._stopped_at = self.now
            heappush(self._heap, (-1, -1, _raise_stop, None))

    def pending(self) -> int:
        """Entries on the agenda (entries held back by callers, see ``push``, are not counted)."""
        return len(self._heap)

    def run(self, until_ps: int, progress: Callable[[int], None] | None = None,
            progress_every: int = 1 << 16) -> str:
        """Process events with time <= ``until_ps``.

        Returns ``"drained"`` (no events left), ``"time_limit"`` (events remain past
        ``until_ps``) or ``"stopped"`` (a callback called :meth:`stop`: no later event runs, and
        ``now`` stays at the time of the event that stopped it). ``progress(now_ps)`` is called
        every ``progress_every`` events.

        >>> k = HeapKernel()
        >>> for t in (1, 2, 3):
        ...     k.schedule(t, lambda t, a: k.stop() if t == 2 else None)
        >>> k.run(until_ps=10), k.now, k.events, k.pending()
        ('stopped', 2, 2, 1)
        """
        heap = self._heap
        pop = heappop
        mask = progress_every - 1
        n = 0
        try:
            while heap:
                if heap[0][0] > until_ps:
                    self.now = until_ps
                    return "time_limit"
                t, _, fn, arg = pop(heap)
                self.now = t
                fn(t, arg)
                n += 1
                if not n & mask and progress is not None:
                    progress(t)
            return "drained"
        except _Stop:
            self.now = self._stopped_at      # the sentinel's -1 is not a time
            self._stop = False
            return "stopped"
        finally:
            self.events += n


class SimpyKernel:
    """The kernel contract on SimPy: each callback is a triggered :class:`simpy.Event`."""

    name = "simpy"

    def __init__(self):
        import simpy
        self._simpy = simpy
        self.env = simpy.Environment()
        self.events = 0
        self._stop = False
        # SimPy's own event counter: an entry's seq is the eid SimPy orders same-time events by
        self.seq = self.env._eid

    @property
    def now(self) -> int:
        return self.env.now

    def push(self, entry) -> None:
        """Schedule a ready-made ``(time_ps, seq, fn, arg)`` entry: what ``env.schedule(ev, NORMAL,
        delay)`` does, with the eid drawn when the entry was built."""
        time_ps, seq, fn, arg = entry
        ev = self._simpy.Event(self.env)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(lambda _e, fn=fn, arg=arg, t=time_ps: self._fire(fn, t, arg))
        heappush(self.env._queue, (time_ps, 1, seq, ev))

    def schedule(self, time_ps: int, fn: Callback, arg: Any = None) -> None:
        self.push((time_ps, next(self.seq), fn, arg))

    def _fire(self, fn, t, arg):
        self.events += 1
        fn(t, arg)
        if self._progress is not None and not self.events & (self._every - 1):
            self._progress(t)
        if self._stop:
            raise _Stop()

    def stop(self) -> None:
        self._stop = True

    def pending(self) -> int:
        return len(self.env._queue)

    def run(self, until_ps: int, progress=None, progress_every: int = 1 << 16) -> str:
        self._progress, self._every, self._stop = progress, progress_every, False
        env = self.env
        try:
            while env._queue:
                if env.peek() > until_ps:
                    env._now = until_ps
                    return "time_limit"
                env.step()
        except _Stop:
            return "stopped"
        return "drained"


class _Stop(Exception):
    """Raised by the sentinel entry of :meth:`HeapKernel.stop` to leave the event loop."""


def _raise_stop(_t, _arg):
    raise _Stop()


KERNELS = {"heap": HeapKernel, "simpy": SimpyKernel}


def make_kernel(name: str):
    """Kernel by name (``heap`` or ``simpy``)."""
    return KERNELS[name]()
