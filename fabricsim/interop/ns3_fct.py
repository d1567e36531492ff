"""Per-message results in the HPCC ns-3 ``fct.txt`` layout.

The layout is the one ``qp_finish`` writes in alibaba-edu/High-Precision-Congestion-Control
(``simulation/scratch/third.cc``), one line per completed queue pair, in completion order::

    fprintf(fout, "%08x %08x %u %u %lu %lu %lu %lu\\n", sip, dip, sport, dport, m_size,
            startTime (ns), Now - startTime (ns), standalone_fct (ns));

and ``analysis/fct_analysis.py`` reads (``$7/$8`` is the slowdown, ``$6+$7`` the finish time,
``$4`` the dport: 100 for normal flows, 200 for incast in its examples).

Mapping from a results folder's messages table (docs/metrics.md):

- ``sip`` / ``dip``: HPCC's ``node_id_to_ip(id) = 0x0b000001 + (id / 256) * 0x10000 +
  (id % 256) * 0x100`` of the GPU ids ``src`` / ``dst`` (GPU ids < 65536, which
  ``ip_to_node_id`` recovers);
- ``sport``: 10000, 10001, ... per (src, dst) pair in message-id order (HPCC numbers a pair's
  flows from 10000 in flow-file order); ``dport``: a constant (default 100);
- ``size``: ``size_bytes``;
- ``start_time``: ``release_ps`` (when the message was handed to the NIC: HPCC's QP start);
- ``fct``: ``end_ps - release_ps``; ``standalone_fct``: ``ideal_fct_ps``, fabricsim's time of the
  message alone on the idle fabric (HPCC: base RTT + bytes with headers / bottleneck rate).
- Times are rounded to the nearest nanosecond (half up), with ``fct`` = rounded end - rounded
  start, so ``start_time + fct`` is the rounded ``end_ps``; each figure is within 0.5 ns of the
  picosecond value (1 ns for ``fct``).
- Only completed messages are written (ns-3 writes a line when a QP finishes), sorted by
  ``end_ps`` then ``message_id``.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..errors import ConfigError

#: HPCC's first source port of every host pair (third.cc: ``portNumder[i][j] = 10000``)
FIRST_SPORT = 10000
DEFAULT_DPORT = 100
#: columns of the messages table the layout needs
NEEDED = ("message_id", "src", "dst", "size_bytes", "release_ps", "end_ps", "ideal_fct_ps", "completed")
MAX_NODE = 0xFFFF


def node_ip(gpu: int) -> int:
    """HPCC's ``node_id_to_ip``: the IPv4 address (as an integer) of node ``gpu``.

    >>> f"{node_ip(0):08x} {node_ip(1):08x} {node_ip(256):08x}"
    '0b000001 0b000101 0b010001'
    """
    return 0x0B000001 + (gpu // 256) * 0x00010000 + (gpu % 256) * 0x00000100


def _ns(ps):
    """Picoseconds (int64 array) to the nearest nanosecond, half up."""
    return (ps + 500) // 1000


def fct_lines(messages: pd.DataFrame, dport: int = DEFAULT_DPORT, source: str = "<messages>") -> list[str]:
    """The ``fct.txt`` lines of a messages table (module docstring). Raises ConfigError if a
    needed column is missing or a GPU id has no HPCC address."""
    missing = [c for c in NEEDED if c not in messages.columns]
    if missing:
        raise ConfigError(f"the messages table has no {', '.join(missing)} column (needed: {', '.join(NEEDED)})",
                          source=source, field="messages")
    if not 0 <= dport <= 0xFFFF:
        raise ConfigError(f"got {dport} (allowed: 0..65535)", field="dport")
    m = messages.sort_values("message_id", kind="stable")
    top = int(max(m["src"].max(), m["dst"].max())) if len(m) else 0
    if top > MAX_NODE:
        raise ConfigError(f"GPU {top} has no HPCC address (allowed: GPU ids 0..{MAX_NODE})", source=source,
                          field="messages.src")
    sport = FIRST_SPORT + m.groupby(["src", "dst"], sort=False).cumcount()
    done = m["completed"].astype(bool).to_numpy()
    m = m.assign(sport=sport)[done]
    if m["ideal_fct_ps"].isna().any():
        i = int(m.loc[m["ideal_fct_ps"].isna(), "message_id"].iloc[0])
        raise ConfigError(f"message {i} has no ideal_fct_ps (needed for standalone_fct)", source=source,
                          field="messages.ideal_fct_ps")
    m = m.sort_values(["end_ps", "message_id"], kind="stable")
    rel = m["release_ps"].astype("int64").to_numpy()
    end = m["end_ps"].astype("int64").to_numpy()
    start_ns, end_ns = _ns(rel), _ns(end)
    ideal_ns = _ns(m["ideal_fct_ps"].astype("int64").to_numpy())
    srcs, dsts = m["src"].astype("int64").tolist(), m["dst"].astype("int64").tolist()
    return [f"{node_ip(s):08x} {node_ip(d):08x} {sp} {dport} {z} {a} {e - a} {i}"
            for s, d, sp, z, a, e, i in zip(srcs, dsts, m["sport"].tolist(), m["size_bytes"].astype("int64").tolist(),
                                           start_ns.tolist(), end_ns.tolist(), ideal_ns.tolist())]


def write_fct(results, path, dport: int = DEFAULT_DPORT) -> tuple[Path, int, int]:
    """Write ``fct.txt`` for the results folder ``results`` (a path or a loaded
    :class:`~fabricsim.analysis.result.Result`). Returns (path, lines written, incomplete messages
    left out); nothing is written on an error."""
    from ..analysis.load import load_results
    res = load_results(results) if isinstance(results, (str, Path)) else results
    msgs = res.messages
    lines = fct_lines(msgs, dport, source=str(getattr(res, "output_dir", None) or "<result>"))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return path, len(lines), int(len(msgs) - len(lines))


__all__ = ["DEFAULT_DPORT", "FIRST_SPORT", "fct_lines", "node_ip", "write_fct"]
