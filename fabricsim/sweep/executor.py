"""Executors: where a sweep's (or a comparison's) points run, chosen by name.

Every executor maps one module-level function over a list of tasks and yields ``(position,
result)`` as results arrive (any order; the caller puts them back in order). Three are built in,
registered in :data:`EXECUTORS`:

``serial``
    In this process, one task after the other (the reference: nothing is pickled).
``processes`` (the default)
    A standard-library :class:`concurrent.futures.ProcessPoolExecutor` of ``jobs`` worker
    processes (default: the CPU count) started with ``spawn`` (no state inherited from this
    process, the same on Linux, macOS and Windows).
``dask``
    A ``dask.distributed`` client (the optional extra ``pip install fabricsim[dask]``): a
    ``LocalCluster`` of ``jobs`` single-threaded worker processes on loopback without dashboard,
    or, with ``scheduler="tcp://host:port"``, an existing cluster (its workers need fabricsim
    installed and the scenario files at the same paths).

A task function never raises for a point that fails (it returns the failure as data); an
exception that reaches the executor (a worker process that died, a result that cannot be
pickled) is yielded as the result, an :class:`Exception` instance, for the caller to record.

>>> with EXECUTORS.get("serial")() as ex:
...     sorted(ex.imap(abs, [-2, 1, -3]))
[(0, 2), (1, 1), (2, 3)]
"""
from __future__ import annotations

import os
from abc import ABC, abstractmethod
from typing import Callable, Iterable, Iterator

from ..errors import ConfigError
from ..registry import Registry

__all__ = ["Executor", "EXECUTORS", "make_executor", "DEFAULT_EXECUTOR", "WorkerDied"]

#: executors by name (plug-ins: the entry-point group ``fabricsim.executors``)
EXECUTORS: Registry = Registry("executor", group="fabricsim.executors")
DEFAULT_EXECUTOR = "processes"


class WorkerDied(RuntimeError):
    """Yielded for a task whose worker process died while running it (killed for memory, a
    crash in an extension module), on its own: the task is the cause."""


class Executor(ABC):
    """Runs a function over tasks. Use as a context manager (it starts and stops its workers).

    Parameters
    ----------
    jobs:
        Workers (default: the CPU count; ``serial`` always has one).
    scheduler:
        Address of an existing cluster (only the ``dask`` executor takes one).
    """

    #: how many tasks run at once
    workers: int = 1

    def __init__(self, jobs: int | None = None, scheduler: str | None = None):
        if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise ConfigError(f"{jobs!r} (allowed: 1 or more)", field="--jobs")
        if scheduler is not None:
            raise ConfigError(f"the {self.registry_name} executor takes no scheduler (allowed: --executor dask "
                              f"--scheduler tcp://HOST:PORT)", field="--scheduler")
        self.workers = jobs or os.cpu_count() or 1
        #: tasks submitted and not yet returned (the progress line's "running")
        self.in_flight = 0

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.close(cancel=exc_type is not None)
        return False

    @abstractmethod
    def imap(self, fn: Callable, tasks: Iterable) -> Iterator[tuple[int, object]]:
        """Yield ``(position, fn(task))`` for every task as it finishes. Closing the iterator
        early (an exception in the caller, Ctrl-C) cancels the tasks not started."""

    def start(self) -> None:
        """Start the workers (raises a ConfigError when they cannot be had: a missing extra, an
        unreachable scheduler); called by :meth:`imap` if not before. Calling it again does nothing."""

    def close(self, cancel: bool = False) -> None:
        """Stop the workers (``cancel``: do not wait for the tasks still running)."""

    def running(self) -> int:
        """Tasks running now (submitted, not returned, at most :attr:`workers`)."""
        return min(self.in_flight, self.workers)


@EXECUTORS.register("serial")
class SerialExecutor(Executor):
    """One task after the other in this process."""

    def __init__(self, jobs: int | None = None, scheduler: str | None = None):
        super().__init__(jobs, scheduler)
        self.workers = 1

    def imap(self, fn, tasks):
        for i, task in enumerate(tasks):
            self.in_flight = 1
            try:
                result = fn(task)
            finally:
                self.in_flight = 0
            yield i, result


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C at the terminal reaches the whole process group; the parent
    decides (finished points are kept, the running ones finish or are abandoned), so a worker
    ignores it rather than dying with a traceback."""
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@EXECUTORS.register("processes")
class ProcessExecutor(Executor):
    """A ``spawn`` process pool of the standard library (``concurrent.futures``).

    A worker process that dies (killed for memory, a crash in an extension) breaks a standard
    pool: every task in it fails with ``BrokenProcessPool``. Here the pool is started again, and
    the tasks that were in it run again one at a time: the one that kills its worker alone is
    yielded as a :class:`WorkerDied` error, the others with their results."""

    def __init__(self, jobs: int | None = None, scheduler: str | None = None):
        super().__init__(jobs, scheduler)
        self._pool = None
        self._children: list = []
        self._before: set = set()

    def start(self):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        if self._pool is not None:
            return
        self._before = set(multiprocessing.active_children())
        self._children = []
        self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=multiprocessing.get_context("spawn"),
                                         initializer=_ignore_sigint)

    def _note_children(self):
        # the pool's processes (started on demand), to stop them when the caller gives up
        import multiprocessing
        self._children += [p for p in multiprocessing.active_children()
                           if p not in self._before and p not in self._children]

    def _restart(self):
        self.close(cancel=True)
        self.start()

    def imap(self, fn, tasks):
        from collections import deque
        from concurrent.futures import FIRST_COMPLETED, wait
        from concurrent.futures.process import BrokenProcessPool
        self.start()
        tasks = list(tasks)
        window = 2 * self.workers          # a few queued behind the running ones: workers never idle
        queue = deque(range(len(tasks)))
        suspects: deque = deque()          # tasks that were in a pool that broke
        pending: dict = {}
        try:
            while queue or pending or suspects:
                if suspects and not pending:         # one alone: does it kill its worker?
                    i = suspects.popleft()
                    fut = self._pool.submit(fn, tasks[i])
                    pending[fut] = i
                    self._note_children()
                    self.in_flight = 1
                    try:
                        result = fut.result()
                    except BrokenProcessPool:
                        result = WorkerDied("the worker process running this point died (killed, or crashed "
                                            "outside Python)")
                        self._restart()
                    except Exception as exc:  # noqa: BLE001 - recorded by the caller, not fatal
                        result = exc
                    pending.clear()
                    self.in_flight = 0
                    yield i, result
                    continue
                broken = False
                while not suspects and queue and len(pending) < window:
                    i = queue.popleft()
                    try:
                        pending[self._pool.submit(fn, tasks[i])] = i
                    except BrokenProcessPool:
                        queue.appendleft(i)
                        broken = True
                        break
                if not broken:
                    self._note_children()
                    self.in_flight = len(pending)
                    done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
                    for fut in done:
                        i = pending.pop(fut)
                        try:
                            result = fut.result()
                        except BrokenProcessPool:
                            suspects.append(i)
                            broken = True
                            continue
                        except Exception as exc:  # noqa: BLE001 - recorded by the caller, not fatal
                            result = exc
                        self.in_flight = len(pending)
                        yield i, result
                if broken:                            # every task still in the pool is lost with it
                    suspects.extend(sorted(pending.values()))
                    pending.clear()
                    self._restart()
        finally:
            for fut in pending:
                fut.cancel()
            self.in_flight = sum(1 for f in pending if f.running())

    def close(self, cancel: bool = False):
        if self._pool is None:
            return
        if cancel:
            self._pool.shutdown(wait=False, cancel_futures=True)
            # the points still running are abandoned (they run again on resume): SIGKILL, since
            # a run turns SIGTERM into a tidy stop that would write its results first
            for p in self._children:
                if p.is_alive():
                    p.kill()
            for p in self._children:
                p.join(timeout=5)
        else:
            self._pool.shutdown(wait=True)
        self._pool = None


@EXECUTORS.register("dask")
class DaskExecutor(Executor):
    """``dask.distributed``: a LocalCluster on loopback (no dashboard), or ``scheduler``.

    ``processes``: LocalCluster workers are processes (default; a simulation holds the GIL, so
    threads would not run in parallel) or threads of this process (``False``: quicker to start,
    for tests)."""

    def __init__(self, jobs: int | None = None, scheduler: str | None = None, processes: bool = True):
        super().__init__(jobs, None)
        if scheduler is not None and not (isinstance(scheduler, str) and "://" in scheduler):
            raise ConfigError(f"{scheduler!r} (allowed: a scheduler address such as tcp://HOST:PORT)",
                              field="--scheduler")
        self.scheduler = scheduler
        self.processes = processes
        self.jobs = jobs
        self._client = None
        self._cluster = None

    def start(self):
        if self._client is not None:
            return
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ConfigError("needs dask.distributed (allowed: pip install 'fabricsim[dask]', or --executor "
                              "processes)", field="--executor dask") from None
        import logging
        if self.scheduler is not None:
            try:
                self._client = Client(self.scheduler, timeout="10s")
            except (OSError, TimeoutError) as exc:
                raise ConfigError(f"cannot reach the scheduler: {' '.join(str(exc).split())}",
                                  field=f"--scheduler {self.scheduler}") from None
            self.workers = max(1, sum(w.get("nthreads", 1) for w in
                                      self._client.scheduler_info()["workers"].values()))
        else:
            # worker processes talk TCP on loopback only; threads of this process talk in-process.
            # No dashboard; the scheduler's plain HTTP endpoints (health, metrics), which it always
            # serves, on a free loopback port rather than 8787 on every interface
            where = {"host": "127.0.0.1"} if self.processes else {}
            # the workers are started with Ctrl-C ignored (a child keeps an ignored SIGINT), so a
            # Ctrl-C to the terminal's process group reaches this process only, which stops the
            # sweep cleanly, instead of printing each worker's traceback
            import signal
            import threading
            main = threading.current_thread() is threading.main_thread()
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
            try:
                self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=self.processes,
                                             dashboard_address=None,
                                             scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                                             silence_logs=logging.ERROR, **where)
            finally:
                if main:
                    signal.signal(signal.SIGINT, previous)
            self._client = Client(self._cluster)

    def imap(self, fn, tasks):
        from distributed import as_completed
        self.start()
        tasks = list(tasks)
        futures = {}
        window = 2 * self.workers
        nxt = 0

        def submit():
            nonlocal nxt
            f = self._client.submit(fn, tasks[nxt], pure=False)   # (equal tasks are distinct points)
            futures[f] = nxt
            nxt += 1
            return f

        first = [submit() for _ in range(min(window, len(tasks)))]
        seq = as_completed(first)
        try:
            self.in_flight = len(futures)
            for fut in seq:
                i = futures.pop(fut)
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - a lost worker is recorded, not fatal
                    result = exc
                if nxt < len(tasks):
                    seq.add(submit())
                self.in_flight = len(futures)
                yield i, result
        finally:
            if futures:
                self._client.cancel(list(futures))

    def close(self, cancel: bool = False):
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None


def make_executor(name: str | Executor | None = None, jobs: int | None = None,
                  scheduler: str | None = None, **options) -> Executor:
    """An executor by name (``None``: :data:`DEFAULT_EXECUTOR`, or ``dask`` when a scheduler is
    given), or ``name`` itself when it is an :class:`Executor` already."""
    if isinstance(name, Executor):
        return name
    if name is None:
        name = "dask" if scheduler is not None else DEFAULT_EXECUTOR
    try:
        cls = EXECUTORS.get(name)
    except KeyError as exc:
        raise ConfigError(str(exc), field="--executor") from None
    if scheduler is not None:
        return cls(jobs=jobs, scheduler=scheduler, **options)
    return cls(jobs=jobs, **options)
