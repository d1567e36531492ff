"""Typed configuration of a scenario file (pydantic v2), one model per section."""
from .scenario import LoadedScenario, OutputsConfig, Scenario, SimulationConfig, load_scenario
from .topology import ClusterConfig, ExplicitTopologyConfig, HgxNodeConfig, LeafSpineConfig, NvlRackConfig, TopologyFileRef
from .traffic import AllToAllTraffic, CsvTraffic, IncastTraffic, PermutationTraffic

__all__ = ["Scenario", "SimulationConfig", "OutputsConfig", "LoadedScenario", "load_scenario",
           "LeafSpineConfig", "ExplicitTopologyConfig", "TopologyFileRef", "PermutationTraffic",
           "AllToAllTraffic", "IncastTraffic", "CsvTraffic"]
