"""PXN relaying (``nic.pxn``): how a message sent through a GPU of the sender's NVLink domain is
cut into pieces, the one definition both engines use.

A relayed message (``EqualCostPaths.pxn_relay`` names the relay GPU: the GPU of the source's
NVLink domain on the destination's rail) goes in chunks of ``nic.pxn_chunk`` bytes. Each chunk is
two legs: ``src -> relay`` over NVLink, one queue pair, no persistent connection, and not goodput
(``final`` False); then, once that leg is all in, ``relay -> dst`` with the message's own queue
pairs and connection (``final`` True: the bytes the pattern asked for). The packet engine starts
the first legs at the message's start and each second leg when its first is in; the flow engine
plans the same legs up front as fluid flows.

>>> for first, second in legs(src=0, dst=9, relay=1, size_bytes=5000, qps=2, conn=-1, chunk_bytes=4096):
...     print(first, second)
Leg(src=0, dst=1, size_bytes=4096, qps=1, conn=-1, final=False) Leg(src=1, dst=9, size_bytes=4096, qps=2, conn=-1, final=True)
Leg(src=0, dst=1, size_bytes=904, qps=1, conn=-1, final=False) Leg(src=1, dst=9, size_bytes=904, qps=2, conn=-1, final=True)
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["Leg", "legs"]


class Leg(NamedTuple):
    """One leg of one chunk of a relayed message."""
    src: int
    dst: int
    size_bytes: int
    qps: int
    conn: int
    final: bool        # the relay -> destination leg (goodput); False: source -> relay over NVLink


def legs(src: int, dst: int, relay: int, size_bytes: int, qps: int, conn: int,
         chunk_bytes: int) -> list[tuple[Leg, Leg]]:
    """``(first leg, second leg)`` of every chunk of the message, in order (none for an empty
    message)."""
    out = []
    for off in range(0, size_bytes, chunk_bytes):
        c = min(chunk_bytes, size_bytes - off)
        out.append((Leg(src, relay, c, 1, -1, False), Leg(relay, dst, c, qps, conn, True)))
    return out
