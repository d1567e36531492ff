"""Traffic section: a built-in pattern (permutation, all_to_all, incast), a CSV message list or a trace."""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, StrictInt, model_validator

from .types import STRICT, PositiveSize, Time


class _Common(BaseModel):
    model_config = STRICT
    message_size: PositiveSize = Field("1MiB", description="bytes per message, e.g. 4MiB")
    qps_per_message: StrictInt = Field(1, ge=1, le=4096,
                                 description="queue pairs a message is spread over (ECMP entropy)")
    start: Time = Field(0, description="release time of every message")


class PermutationTraffic(_Common):
    """Every host sends one message to a distinct host; no host sends to itself (a derangement).

    ``locality: cross_leaf`` also forbids destinations under the sender's own leaf.
    """

    pattern: Literal["permutation"] = "permutation"
    locality: Literal["any", "cross_leaf"] = "any"


class AllToAllTraffic(_Common):
    """Every host sends ``message_size`` bytes to every other host."""

    pattern: Literal["all_to_all"] = "all_to_all"


class IncastTraffic(_Common):
    """``senders`` hosts each send one message to ``receiver`` (N to 1)."""

    pattern: Literal["incast"] = "incast"
    senders: StrictInt = Field(8, ge=1)
    receiver: StrictInt = Field(0, ge=0)


def _qps_per_connection():
    return Field(1, ge=1, le=4096, description="queue pairs of a connection (messages with conn >= 0): its "
                                               "messages are split over them (NCCL_IB_QPS_PER_CONNECTION)")


class CsvTraffic(BaseModel):
    """A message list in CSV: columns ``src, dst, size_bytes`` (or ``size`` with units) and
    optionally ``start_ps`` (or ``start`` with units), ``id``, ``qps``, ``deps`` (ids separated by
    ``;``), ``gap_ps`` / ``gap`` (compute time between the dependencies finishing and the start)
    and ``conn`` (logical connection, docs/traces.md "Connections"; -1 or empty: fresh queue pairs).
    """

    model_config = STRICT
    pattern: Literal["csv"] = "csv"
    path: str
    qps_per_message: StrictInt = Field(1, ge=1, le=4096)
    qps_per_connection: StrictInt = _qps_per_connection()


class TraceTraffic(BaseModel):
    """Replay a v1 message trace (docs/traces.md): Parquet, CSV or JSON Lines by extension.

    Each message is released at ``start_ps`` or ``gap_ps`` after its ``deps`` complete, whichever
    is later; op, phase, layer and microbatch become message tags. A message with ``conn = -1``
    gets ``qps_per_message`` fresh queue pairs; one with ``conn >= 0`` is sent on the
    ``qps_per_connection`` queue pairs of connection ``(conn, src, dst)``, shared with every other
    message of that connection (docs/traces.md, "Connections").
    """

    model_config = STRICT
    pattern: Literal["trace"] = "trace"
    path: str
    qps_per_message: StrictInt = Field(1, ge=1, le=4096,
                                       description="queue pairs a message with conn = -1 is spread over "
                                                   "(ECMP entropy)")
    qps_per_connection: StrictInt = _qps_per_connection()


TrafficConfig = Annotated[Union[PermutationTraffic, AllToAllTraffic, IncastTraffic, CsvTraffic, TraceTraffic],
                          Field(discriminator="pattern")]
