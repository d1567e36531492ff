"""Interop with peer simulators and benchmarks, for cross-checking (docs/interop.md).

- :mod:`.htsim_cm`: htsim connection matrices (``.cm``) to and from fabricsim traces;
- :mod:`.ns3_fct`: per-message results in the HPCC ns-3 ``fct.txt`` layout;
- :mod:`.nccl_table`: collectives results as nccl-tests performance tables.

The click group :data:`fabricsim.interop.cli.interop` holds the commands.
"""
from .htsim_cm import CmExport, CmImport, format_cm, read_cm, write_cm
from .nccl_table import bus_factor, format_nccl_tables, nccl_rows, nccl_tables
from .ns3_fct import fct_lines, node_ip, write_fct

__all__ = ["CmExport", "CmImport", "bus_factor", "fct_lines", "format_cm", "format_nccl_tables", "nccl_rows",
           "nccl_tables", "node_ip", "read_cm", "write_cm", "write_fct"]
