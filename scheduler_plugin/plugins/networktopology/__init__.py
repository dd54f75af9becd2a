"""NetworkTopology: InfiniBand leaf-group placement for gangs (seed 004)."""

from scheduler_plugin.plugins.networktopology.plugin import NAME, NetworkTopology, NetworkTopologyArgs

__all__ = ["NAME", "NetworkTopology", "NetworkTopologyArgs"]
