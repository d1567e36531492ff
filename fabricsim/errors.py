"""Exceptions with the exit codes the CLI maps them to.

Every user-facing error is one line: ``FILE: FIELD.PATH: what is wrong (allowed: ...)``.
:class:`ConfigError` (and its subclasses) mean bad input and exit with status 2;
:class:`SimulationError` means the simulator itself failed and exits with status 1.
:class:`TraceError` (a ConfigError) names the row and column of a trace file explicitly:
``FILE: line N: column C: what is wrong`` (``row N`` for Parquet).
"""
from __future__ import annotations


class FabricsimError(Exception):
    """Base of all fabricsim errors."""

    exit_code = 1


class ConfigError(FabricsimError):
    """Bad input: a malformed scenario, topology, trace or parameter (exit status 2).

    Parameters
    ----------
    message:
        What is wrong and what is allowed.
    source:
        The file (or "<dict>" for in-memory input) the error was found in.
    field:
        Dotted path of the offending field, e.g. ``topology.spines``.
    line:
        1-based line number in ``source`` where known.
    """

    exit_code = 2
    #: True when the offending value came from a ``--set`` override rather than the file
    from_override = False

    def __init__(self, message: str, source: str | None = None, field: str | None = None,
                 line: int | None = None):
        self.message = message
        self.source = source
        self.field = field
        self.line = line
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        if self.source:
            parts.append(f"{self.source}:{self.line}" if self.line else self.source)
        if self.field:
            parts.append(self.field)
        parts.append(self.message)
        return ": ".join(parts)


class TopologyError(ConfigError):
    """A topology that cannot be built or routed (exit status 2)."""


class TrafficError(ConfigError):
    """Traffic that does not fit the topology or is malformed (exit status 2)."""


class TraceError(ConfigError):
    """A malformed message trace (exit status 2), located by file, row and column.

    ``line`` is the 1-based line for CSV and JSON Lines files; ``row`` the 0-based row index for
    Parquet files. The one-line form is ``FILE: line N: column C: message`` (or ``row N``).
    """

    def __init__(self, message: str, source: str | None = None, column: str | None = None,
                 line: int | None = None, row: int | None = None):
        self.row = row
        self.column = column
        super().__init__(message, source=source, field=column, line=line)

    def one_line(self) -> str:
        parts = [self.source] if self.source else []
        if self.line is not None:
            parts.append(f"line {self.line}")
        elif getattr(self, "row", None) is not None:
            parts.append(f"row {self.row}")
        if getattr(self, "column", None):
            parts.append(f"column {self.column}")
        parts.append(self.message)
        return ": ".join(parts)


class SimulationError(FabricsimError):
    """The simulation failed for a reason that is not bad input (exit status 1)."""
