"""Interop with peer simulators and benchmarks, for cross-checking (docs/interop.md).

- :mod:`.htsim_cm`: htsim connection matrices (``.cm``) to and from fabricsim traces;
- :mod:`.ns3_fct`: per-message results in the HPCC ns-3 ``fct.txt`` layout;
- :mod:`.nccl_table`: collectives results as nccl-tests performance tables.

The click group :data:`fabricsim.interop.cli.interop` holds the commands.
"""
_LAZY = {  # imported on first use, so the CLI (which attaches interop.cli) starts without numpy
    "CmExport": "htsim_cm", "CmImport": "htsim_cm", "format_cm": "htsim_cm", "read_cm": "htsim_cm",
    "write_cm": "htsim_cm", "bus_factor": "nccl_table", "format_nccl_tables": "nccl_table",
    "nccl_rows": "nccl_table", "nccl_tables": "nccl_table", "fct_lines": "ns3_fct", "node_ip": "ns3_fct",
    "write_fct": "ns3_fct",
}
__all__ = sorted(_LAZY)


def __getattr__(name):
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
