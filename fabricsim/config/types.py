"""Pydantic field types that read unit strings and store integers in SI base units.

``Rate`` -> bit/s, ``Size`` -> bytes, ``Time`` -> picoseconds. They serialise back to
exact human strings so a resolved scenario reads like the file that produced it. Every value
must fit a signed 64-bit integer (``INT64_MAX``): the engines hold them in int64 columns.

Their JSON Schema (:func:`fabricsim.config.jsonschema.scenario_json_schema`) is "a whole number
or a unit string" with the pattern :func:`fabricsim.units.unit_pattern` builds.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, ConfigDict, PlainSerializer, WithJsonSchema

from .. import units

STRICT = ConfigDict(extra="forbid", validate_default=True, frozen=False)

#: largest value of any unit-typed field, in base units (bit/s, bytes, ps): a signed 64-bit integer
INT64_MAX = units.INT64_MAX


def _bounded(parse, kind, positive):
    def check(v):
        value = parse(v)
        if positive and value <= 0:
            raise ValueError(f"got {v!r} (allowed: a {kind} greater than zero)")
        if value > INT64_MAX:
            raise ValueError(f"got {v!r} = {value} {units.BASE_UNIT[kind]} (allowed: at most "
                             f"{INT64_MAX} {units.BASE_UNIT[kind]}, a 64-bit integer)")
        return value
    return check


def _schema(kind: str, positive: bool) -> WithJsonSchema:
    """JSON Schema of a unit field: a whole number in base units or a unit string."""
    whole = {"type": "integer", "minimum": 1 if positive else 0, "maximum": INT64_MAX}
    if kind == "time":
        # a bare number of a time needs a unit, except 0
        whole = {"type": "integer", "const": 0} if not positive else None
    text = {"type": "string", "pattern": units.unit_pattern(kind)}
    alts = [a for a in (whole, text) if a is not None]
    return WithJsonSchema({"anyOf": alts, "x-unit": units.BASE_UNIT[kind]}, mode="validation")


def _unit(kind: str, parse, exact, positive: bool):
    return Annotated[int, BeforeValidator(_bounded(parse, kind, positive)),
                     PlainSerializer(exact, return_type=str), _schema(kind, positive)]


Rate = _unit("rate", units.parse_rate, units.exact_rate, True)
Size = _unit("size", units.parse_size, units.exact_size, False)
PositiveSize = _unit("size", units.parse_size, units.exact_size, True)
Time = _unit("time", units.parse_time, units.exact_time, False)
PositiveTime = _unit("time", units.parse_time, units.exact_time, True)
