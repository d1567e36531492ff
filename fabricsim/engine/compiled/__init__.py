"""``simulation.kernel: compiled``: the packet engine's datapath compiled with numba (issue 15).

The design is docs/compiled-core.md; this package is its slice 1 (section 4.2), slice 2
(routing), slice 4's adaptive timeouts and ACK coalescing, slice 3's go-back-N receiver
and PFC, and slice 5's congestion-control layer with the ``telemetry`` controller and DCQCN: every routing
policy (ECMP, spraying, adaptive routing graded by queue and/or utilisation with refresh and remote
grades or exact, flowlet, pinned) over lossy switches with per-port
drop-tail buffers or lossless PFC switches, ECN (RED, at enqueue or dequeue) and INT, the ``ddp``
receiver (SACK + RACK), the ``go_back_n`` receiver (NAK on a gap, the sender's rewind) or the
``reorder_buffer`` receiver (a bounded buffer per host, overflow discarded), in packets or cells,
acknowledging every unit or coalescing ACKs (``ack_every > 1``: the delayed-ACK timer, SACK
bitmaps; a coalesced ACK echoes the INT of the latest-sent unit it covers), fixed or adaptive
timeouts (RTT estimator, back-off, jitter draws, timeout probes, D-SACK) and ``retry_limit``,
congestion control ``none``, ``telemetry`` (windows and pacing) or ``dcqcn`` / ``dcqcn_cx`` (the
receiver's CNPs in the strict-priority class, the reaction point's cuts, timers and byte counter,
pacing), hosts with one or several NIC ports (multi-plane NICs split per packet or per flow, the
receiver's control packets, coalesced ACKs and CNPs too, spread over its ports as
``PacketEngine.reply_nic`` does), and NVLink domains with credit flow control (net/nvlink.py: the
GPUs' links, the chips, completion on the last byte), beside NIC ports or alone, with PXN's relayed
pieces (``nic.pxn``): the whole ``spectrum_x`` and ``ethernet`` profiles; messages on persistent
connections (the NIC's send-completion hook, the RTT estimator's ``heir`` chain; the connection's
lifecycle is the engine's own) and shared switch buffers (a plain pool or the dynamic threshold). Any other scenario runs on
``kernel: heap`` and the run says why (:mod:`.coverage`). Results are bit-identical to ``heap``
(tests/test_kernel_equivalence.py).

How a run goes. :class:`~fabricsim.engine.packet.PacketEngine` is built exactly as for ``heap``
(every object, the routes, the switches' set-up); :class:`CompiledKernel` then flattens it
(:mod:`.state`) and takes the engine's ``kernel`` role. ``PacketEngine.run`` is unchanged: it
schedules the initial releases and the link sampler through :meth:`CompiledKernel.schedule`
and calls :meth:`CompiledKernel.run`, which runs the compiled loop (:mod:`.core`) and, whenever
an event belongs to the message lifecycle (a release, a completion, a failure, a link sample),
runs the engine's own Python method for it, with the compiled state copied where that method
reads it. Releases due at the same time come back together; a quiet message's completion (on no
connection, with no dependents) is logged by the core and recorded when it next returns
(:meth:`CompiledKernel._drain`). At the end the state is written back onto the Python objects, and the engine builds
every table from them as it always does.

numba compiles the core the first time it is used on a machine (about a minute) and caches it
on disk next to this package.
"""
from __future__ import annotations

from ...errors import SimulationError
from ...net.sender import ack_wait_ps
from . import core as C
from . import state as S


class _CompiledNic:
    """Stands in for a host's :class:`~fabricsim.net.nic.Nic` in the engine's ``nics`` lists while
    a compiled run holds the datapath: ``_start`` finds the eligible ports (``port``, ``nvlink``)
    and hands each new queue pair to ``add``, which registers it with the compiled state."""

    __slots__ = ("nic", "port", "index", "kernel", "nvlink", "unit")

    def __init__(self, nic, index, kernel):
        self.nic = nic
        self.port = nic.port
        self.index = index
        self.kernel = kernel
        self.nvlink = nic.nvlink            # an NVLink link (NvlinkNic): _start reads it, and its unit
        self.unit = getattr(nic, "unit", 0)

    def add(self, t, qp):
        k = self.kernel
        q = k.qp_row.get(id(qp))
        if q is None:
            q = k.register(qp)
        nics = qp.nics
        j = 0 if nics[0] is self else nics.index(self)        # this port's slot of the queue pair
        k._fn["nic_add"](k.X, int(k.X.Q[q, C.Q_N0]) + j, t)


class CompiledKernel:
    """The kernel contract (:mod:`fabricsim.engine.kernel`) over the compiled state of one engine."""

    name = "compiled"

    def __init__(self, engine):
        self.engine = engine
        #: the Python kernel the engine was built with: its objects still hold its push / seq,
        #: which nothing inside the compiled slice calls (checked after the run)
        self._built_on = engine.kernel
        self.nic_row: dict = {}
        self.X = S.build(engine, self.nic_row)
        self.qps: list = []                 # QueuePair objects by compiled row
        self.qp_row: dict = {}              # id(QueuePair) -> row
        self._stop = False
        self._stopped_at = 0
        self._read_t = -1                   # the last time Python read the ports (a sample, the final snapshot)
        #: the MessageState of each message row: the messages, then PXN pieces as they start
        self.states: list = list(engine._rows)
        self._piece_row: dict = {}          # id(piece MessageState) -> its row
        engine._settle_ports = self._freeze
        # persistent connections: a flushed message's queue pairs stop in the compiled state, and a
        # message ending outside a completion of its own (one deferred behind an earlier message
        # on its connection, or flushed) ends with its counters as they stand
        engine._stop = self._stop_qps
        self._finish_py = engine._finish
        engine._finish = self._finish_hook
        self._uid_row: dict = {}            # queue-pair uid -> the first row registered with it (Q_FLO)
        self._conn_last: dict = {}          # queue-pair uid of a connection -> the row of its latest queue pair
        self._snap = self._snapshot_rows(engine.ports)
        if self._snap is not None:
            engine._snapshot = self._snapshot
        # slice 6: a message whose completion asks nothing of Python at once (not on a connection, no
        # dependents: PacketEngine.message_done then only records it) is "quiet": the core logs its
        # completion (X.CL) and Python records it when it next runs (_drain), in the same order
        table = engine.replay.table
        n = len(table)
        self.quiet_done = 0                 # quiet completions recorded from the log (tests read it)
        if n:
            self.X.M[:n, C.M_QUIET] = (table.conn < 0) & engine.replay.leaves()
        self._release = engine.release
        self._sample = engine._sample_links
        self._nics = dict(engine.nics)
        for h, nics in engine.nics.items():
            engine.nics[h] = [_CompiledNic(nic, self.nic_row[nic], self) for nic in nics]
        self._reply: dict = {}              # (receiving host, sender) -> (offset, count) of its ports in X.RL
        self._rl_n = 0
        self._slots = 0                     # NIC slots (X.QN rows) and PSNs (arena) given to queue pairs so far
        self._arena = 0
        self._load()

    def _load(self) -> None:
        """Compile the core's entry points for this state's types, or load them from numba's disk
        cache: here, when the engine is built, so that the run's own wall time
        (``summary.run.wall_time_s``) is the simulation's. The calls then go to the compiled
        entry points directly: the state's types never change (a pool grows into arrays of the
        same kind), and the dispatcher's type check of a 40-array tuple costs more than most
        calls (28 us against 5 us, measured)."""
        import numba
        C.check_cache()
        x = numba.typeof(self.X)
        i = numba.int64
        self._fn = {}
        qp_init = (i,) * 6 + (numba.uint64,) + (i,) * 7 + (numba.float64,) + (i,) * 3 + (numba.boolean, i)
        for fn, args in ((C.run, (i,)), (C.nic_add, (i, i)), (C.push, (i, i, i, i, i)), (C.settle_all, (i,)),
                         (C.tel_rehash, ()), (C.stop_message, (i,)), (C.qp_init, qp_init)):
            sig = (x, *args)
            fn.compile(sig)
            self._fn[fn.__name__] = fn.overloads[sig].entry_point

    # ------------------------------------------------------------ the kernel contract
    @property
    def now(self) -> int:
        return int(self.X.g[C.G_NOW])

    @property
    def events(self) -> int:
        return int(self.X.g[C.G_EVENTS])

    def pending(self) -> int:
        return int(self.X.g[C.G_HN])

    def schedule(self, time_ps: int, fn, arg=None) -> None:
        """The engine's lifecycle entries: releases and the link sampler (nothing else is
        scheduled from Python in the compiled slice: a connection's ``_next_on_connection`` is
        scheduled by the core's send-completion hook, ``E_SENT``)."""
        if fn == self._release:
            kind, a = C.E_RELEASE, arg.row
        elif fn == self._sample:
            kind, a = C.E_SAMPLE, 0
        else:
            raise SimulationError(f"kernel: compiled cannot schedule {fn!r} (outside the compiled slice)")
        self._need("heap", int(self.X.g[C.G_HN]) + C.SPACE)
        g = self.X.g
        s = int(g[C.G_SEQ])
        g[C.G_SEQ] = s + 1
        self._fn["push"](self.X, time_ps, s, kind, a, 0)

    def stop(self) -> None:
        if not self._stop:
            self._stop = True
            self._stopped_at = self.now

    # ------------------------------------------------------------ queue pairs
    def register(self, qp) -> int:
        """A queue pair the engine has just created: its row in the compiled state, with a NIC slot
        per port it may use (``qp.nics``, in order) and the ports its receiver replies by."""
        q = len(self.qps)
        flow = qp.flow
        X = self.X
        cc = X.g[C.G_CC]
        if not cc and (flow.window_bytes is not None or flow.rate_bps != flow.line_bps):
            raise SimulationError("kernel: compiled: a queue pair outside the compiled slice (a window or a paced "
                                  "rate without congestion control)")
        nics = qp.nics
        nn = len(nics)
        s0, base = self._slots, self._arena         # this queue pair's first NIC slot and PSN
        self._slots, self._arena = s0 + nn, base + qp.npsn
        if q >= X.Q.shape[0]:
            self._need("qp", q + 1)
        if s0 + nn > X.QN.shape[0]:
            self._need("qn", s0 + nn)
        if base + qp.npsn + 1 > X.a_flag.shape[0]:
            self._need("arena", base + qp.npsn + 1)
        st = qp.msg
        row = self._row(st)
        nvlink = nics[0].nvlink
        rport, rl0, rln = (0, 0, 0) if nvlink else self._reply_ports(qp)
        X = self.X
        if not self._fn["qp_init"](X, q, row, qp.uid, self._uid_row.setdefault(qp.uid, q), qp.src, qp.dst, qp.hash,
                                   qp.size, qp.npsn, s0, nn, nics[0].index, base, flow.line_bps,
                                   float(flow.rate_bps), rport, rl0, rln, bool(nvlink),
                                   # the send-completion hook (a message on a persistent connection:
                                   # PacketEngine._start set it before creating the queue pairs)
                                   1 if st.on_sent else 0):
            raise SimulationError("kernel: compiled: a message's queue pairs were not created together")
        for j in range(1, nn):
            X.QN[s0 + j, C.QN_QP] = q
            X.QN[s0 + j, C.QN_NIC] = nics[j].index
        if cc or flow.window_bytes is not None:
            S.register_flow(X, q, flow)         # the window and CC state cc.start set
        if not nvlink and self.engine._conn_qp.get(qp.uid) is qp:
            # a persistent connection's queue pair (PacketEngine._start): it takes over the RTT
            # estimator of the connection's previous one (its heir from now on), whose state is
            # the compiled row's, not the Python object's
            prev = self._conn_last.get(qp.uid)
            if prev is not None:
                qp.srtt, qp.rttvar = int(X.Q[prev, C.Q_SRTT]), int(X.Q[prev, C.Q_RTTVAR])
                X.Q[prev, C.Q_HEIR] = q
            self._conn_last[qp.uid] = q
        if X.g[C.G_RTO_ADAPTIVE]:
            # the idle round trip, read before the first RTT sample (heap works it out at the
            # first send's timer: the same pure function of the two hosts, memoised per pair)
            X.Q[q, C.Q_BRTT] = qp.flow.base_rtt_ps
            X.Q[q, C.Q_SRTT], X.Q[q, C.Q_RTTVAR] = qp.srtt, qp.rttvar
            snd = self.engine.sender
            if snd.ack_wait_bytes:
                # ACK coalescing's allowance at this queue pair's line rate (Sender.rto's, in Python's
                # integers: ack_wait_bytes * PS_BITS may pass 2^63)
                X.Q[q, C.Q_WAIT] = ack_wait_ps(snd.ack_wait_ps, snd.ack_wait_bytes, qp.flow.line_bps)
        self.qps.append(qp)
        self.qp_row[id(qp)] = q
        return q

    def _row(self, st) -> int:
        """The message row of ``st``: its own for a message; for a PXN piece (``st.parent``: a
        piece of a message relayed through a GPU of its domain) a new row after the others."""
        if st.row is not None:
            return st.row
        r = self._piece_row.get(id(st))
        if r is None:
            r = self._piece_row[id(st)] = len(self.states)
            self.states.append(st)
            self._need("msg", r + 1)
            X = self.X
            X.M[r, C.M_SIZE] = st.size
            X.M[r, C.M_PIECE] = 1
            X.M[r, C.M_NONFINAL] = not st.final
        return r

    def _msg_row(self, st):
        """The message row of ``st`` (a message or a registered PXN piece), or None."""
        return st.row if st.row is not None else self._piece_row.get(id(st))

    def _stop_qps(self, st) -> None:
        """``PacketEngine._stop`` while compiled: ``st``'s queue pairs stopped in the compiled state
        (its own queue pairs only, as ``st.qps``: a relayed message's pieces run on)."""
        r = self._msg_row(st)
        if r is not None and self.X.M[r, C.M_QN]:
            self._fn["stop_message"](self.X, r)

    def _finish_hook(self, st, t) -> None:
        """``PacketEngine._finish`` while compiled: a message on a persistent connection may end
        after its own completion (deferred behind an earlier message) or without one (flushed), so
        its counters are copied from the compiled state first, as they stand at ``t``; its row is
        done from now on (``st.done``)."""
        r = self._msg_row(st)
        if r is not None and st.msg.conn >= 0:
            X = self.X
            if X.M[r, C.M_QN]:
                S.fold_reorder(X, self.states)
                S.sync_message(X, st, r)
            X.M[r, C.M_DONE] = 1
        self._finish_py(st, t)

    def _freeze(self, t) -> None:
        """``PacketEngine._settle_ports`` while compiled: the switch ports' dequeue-time samples
        settled, and the ports written back, when the last message ends (``_finish`` then
        freezes the links table and the final link sample from them)."""
        self._fn["settle_all"](self.X, t)
        S.write_ports(self.X, self.engine.ports)
        self._read_t = t

    def _snapshot_rows(self, ports):
        """The port rows of ``ports`` (the engine's order) and whether each is a lossless switch port,
        for :meth:`_snapshot`; None with an NVLink port (a chip port's backlog pops its units:
        ``PacketEngine._snapshot`` on the written-back ports then)."""
        from ...net.lossless import LosslessPort
        from ...net.nvlink import NvlinkPort
        if any(isinstance(p, NvlinkPort) for p in ports):
            return None
        rows = S.np.array([p.index for p in ports], dtype=S.np.int64)
        lossless = S.np.array([isinstance(p, LosslessPort) and p.nic is None for p in ports], dtype=bool)
        return rows, lossless

    def _snapshot(self, t):
        """``PacketEngine._snapshot(t)`` read from the compiled state, the same integers: a lossless
        switch port has sent ``tx_bytes`` less the packet on the wire and holds ``qbytes``; any other
        port (Lindley) holds ``(busy_until - t) * rate // PS_BITS`` (as ``_backlog_bytes`` splits it:
        ``rd / rn`` = PS_BITS / rate, products below 2^62) and has sent ``tx_bytes`` less that."""
        np = S.np
        rows, lossless = self._snap
        P = self.X.P[rows]
        d = np.maximum(P[:, C.P_BUSY] - t, 0)
        rn, rd = P[:, C.P_RN], P[:, C.P_RD]
        queued = (d // rd) * rn + ((d % rd) * rn) // rd
        txb = P[:, C.P_TXB]
        sent = txb - queued
        if lossless.any():
            cur = P[:, C.P_CUR]
            wire = np.where(cur >= 0, self.X.K[np.maximum(cur, 0), C.K_WIRE], 0)
            queued = np.where(lossless, P[:, C.P_QBYTES], queued)
            sent = np.where(lossless, txb - wire, sent)
        return (t, sent.tolist(), queued.tolist())

    def _reply_ports(self, qp) -> tuple:
        """Where the receiver of ``qp`` sends its control packets (``PacketEngine.reply_nic``), as
        ``(port, first, count)``: one port, fixed, when the receiving host has one eligible port
        towards the sender or ``qp`` uses one port (``nics[qp.hash % n]``, a pure function of the two
        hosts and the hash); else -1 and the eligible ports (memoised per pair of hosts, ``count``
        of them from ``first`` in ``X.RL``), chosen per packet."""
        nics = self.engine.eligible_nics(qp.dst, qp.src)
        n = len(nics)
        if n == 1 or len(qp.nics) == 1:
            return nics[qp.hash % n].index, 0, 0
        key = (qp.dst, qp.src)
        got = self._reply.get(key)
        if got is None:
            self._need("rl", self._rl_n + n)
            self.X.RL[self._rl_n:self._rl_n + n] = [nic.index for nic in nics]
            got = self._reply[key] = (self._rl_n, n)
            self._rl_n += n
        return -1, got[0], got[1]

    def _drain(self) -> None:
        """Record the quiet completions the core logged since Python last ran (X.CL), in the order
        they happened, by the engine's own ``message_done``, with what it reads as it stood at
        each: the recorder's delivered total, and where the recorder makes the row now
        (``rows_at_message_end``: streamed) the message's counters. Its reorder histogram is the
        whole reorder log folded: a message logs reorder distances before its completion only
        (every unit that arrives after it is a duplicate, which logs none). Runs after every return
        of the core, before anything else reads its state."""
        X = self.X
        n = int(X.g[C.G_CL_N])
        if not n:
            return
        X.g[C.G_CL_N] = 0
        self.quiet_done += n
        eng = self.engine
        rows, rec, done = eng._rows, eng.recorder, eng.message_done
        log = X.CL[:n].tolist()
        if rec.rows_at_message_end:
            S.fold_reorder(X, self.states)
            w = C.CL_M + X.M.shape[1]
            for e in log:
                st = rows[e[C.CL_ROW]]
                S.sync_row(st, e[C.CL_M:w], e[w:])
                rec.delivered_total = e[C.CL_DELIV]
                done(st, e[C.CL_T])
        else:
            for e in log:
                rec.delivered_total = e[C.CL_DELIV]
                done(rows[e[C.CL_ROW]], e[C.CL_T])
        S.sync_recorder(X, rec)

    def _need(self, group: str, n: int) -> None:
        if n > getattr(self.X, S.POOLS[group]).shape[0]:
            self.X = S.grow(self.X, group, n)

    def _space(self) -> None:
        X = self.X
        g = X.g
        if g[C.G_PNFREE] < 4 * C.SPACE:
            self._need("pkt", 2 * X.K.shape[0])
        if g[C.G_DNFREE] < 4 * C.SPACE:
            self._need("node", 2 * self.X.D.shape[0])
        if g[C.G_BNFREE] < 4 * C.SPACE:
            self._need("bm", 2 * self.X.BM.shape[0])
        self._need("heap", int(g[C.G_HN]) + 4 * C.SPACE)
        if g[C.G_OLOG_N] + C.SPACE > X.OL.shape[1]:
            S.fold_reorder(self.X, self.states)
        if self.X.g[C.G_HN]:
            self._need("good", int(self.X.HP[0, 0]) // int(g[C.G_BIN]) + 2)
        if g[C.G_CC] == C.CC_TELEMETRY:
            m = int(g[C.G_MAXHOP])
            if g[C.G_TNNFREE] < 2 * m + 4 * C.SPACE:
                self._need("tnode", 2 * self.X.TN.shape[0])
            n = int(g[C.G_TH_N]) + 4 * m
            self._need("thist", n + 1)
            if 2 * n > len(self.X.HT):
                # telemetry's port histories: a table twice the size, refilled (at most half full)
                size = len(self.X.HT)
                while 2 * n > size:
                    size *= 2
                self.X = self.X._replace(HT=S.np.full(size, -1, dtype=S.np.int64))
                self.X.g[C.G_HT_BITS] = size.bit_length() - 1
                self._fn["tel_rehash"](self.X)

    # ------------------------------------------------------------ run
    def run(self, until_ps: int, progress=None, progress_every: int = 1 << 16) -> str:
        """Run to ``until_ps`` (the contract of :meth:`fabricsim.engine.kernel.HeapKernel.run`)."""
        if progress_every != C.PROGRESS_EVERY:
            raise SimulationError(f"kernel: compiled reports progress every {C.PROGRESS_EVERY} events")
        eng = self.engine
        rows = eng._rows
        self.X.g[C.G_RUN_N] = 0
        run = self._fn["run"]
        try:
            while True:
                # (the core logs quiet completions up to the last message's, which reaches Python)
                self.X.g[C.G_QUIET_LEFT] = eng.remaining - 1
                r = run(self.X, until_ps)
                self._drain()
                X = self.X
                g = X.g
                if r == C.R_DRAINED:
                    return "drained"
                if r == C.R_TIME_LIMIT:
                    return "time_limit"
                if r == C.R_SPACE:
                    self._space()
                    continue
                if r == C.R_PROGRESS:
                    if progress is not None:
                        progress(int(g[C.G_NOW]))
                    continue
                if r == C.R_ERROR:
                    raise SimulationError(f"kernel: compiled: unknown agenda entry kind {int(g[C.G_ERR])}")
                kind, a, t = int(g[C.G_PY_KIND]), int(g[C.G_PY_A]), int(g[C.G_PY_T])
                g[C.G_PY_KIND] = C.P_NONE
                S.sync_recorder(X, eng.recorder)
                if kind == C.P_RELEASE:
                    eng.release(t, rows[a])
                    n = int(g[C.G_PY_N])
                    if n:
                        # the releases popped with it (core._more_releases), in agenda order; each may push
                        # entries (its NICs' attempts), so the agenda keeps the room the core leaves
                        for a in X.RB[:n].tolist():
                            if g[C.G_HN] + C.SPACE > self.X.HP.shape[0]:
                                self._need("heap", int(g[C.G_HN]) + C.SPACE)
                            eng.release(t, rows[a])
                elif kind == C.P_SENT:
                    eng._next_on_connection(t, self.states[a])
                elif kind == C.P_SAMPLE:
                    if self._snap is None:      # (else _snapshot reads X: the Port objects wait for the end)
                        S.write_ports(X, eng.ports, counters=False)
                    self._read_t = t
                    eng._sample_links(t, None)
                else:
                    qp = self.qps[a] if kind == C.P_FAIL else None
                    r = int(X.Q[a, C.Q_MSG]) if qp is not None else a
                    st = self.states[r]
                    S.fold_reorder(X, self.states)
                    S.sync_message(X, st, r)
                    if qp is not None:
                        eng.fail_qp(qp, t, "retry_exceeded")
                    else:
                        eng.message_done(st, t)
                        if not st.done:
                            # deferred behind an earlier message on its connection: as on heap, the
                            # receiver reports its completion again at each later arrival, and a
                            # queue pair of it that gives up still fails it (PacketEngine.fail_qp)
                            self.X.M[r, C.M_DONE] = 0
                if self._stop:
                    self._stop = False
                    self.X.g[C.G_NOW] = self._stopped_at
                    return "stopped"
                if progress is not None and not int(self.X.g[C.G_RUN_N]) & (C.PROGRESS_EVERY - 1):
                    progress(t)
        finally:
            self._drain()
            eng.nics.update(self._nics)      # the real NIC objects again, for the end-of-run tables
            S.write_back(self.X, eng, self.qps, self.nic_row, self.states, self._read_t)
            if self._built_on.pending():
                raise SimulationError("kernel: compiled: a model scheduled an event on the Python kernel (a "
                                      "feature outside the compiled slice that coverage.py let through)")
