"""Pydantic field types that read unit strings and store integers in SI base units.

``Rate`` -> bit/s, ``Size`` -> bytes, ``Time`` -> picoseconds. They serialise back to
exact human strings so a resolved scenario reads like the file that produced it.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, PlainSerializer

from .. import units

STRICT = ConfigDict(extra="forbid", validate_default=True, frozen=False)


def _positive(parse, kind):
    def check(v):
        value = parse(v)
        if value <= 0:
            raise ValueError(f"got {v!r} (allowed: a {kind} greater than zero)")
        return value
    return check


Rate = Annotated[int, BeforeValidator(_positive(units.parse_rate, "rate")),
                 PlainSerializer(units.exact_rate, return_type=str)]
Size = Annotated[int, BeforeValidator(units.parse_size), PlainSerializer(units.exact_size, return_type=str)]
PositiveSize = Annotated[int, BeforeValidator(_positive(units.parse_size, "size")),
                         PlainSerializer(units.exact_size, return_type=str)]
Time = Annotated[int, BeforeValidator(units.parse_time), PlainSerializer(units.exact_time, return_type=str)]
PositiveTime = Annotated[int, BeforeValidator(_positive(units.parse_time, "time")),
                         PlainSerializer(units.exact_time, return_type=str)]
