"""This machine as a real Kubernetes node for the harness (see node.py)."""

from tests.harness.realnode.node import REAL_NODE_LABEL, RealNode

__all__ = ["REAL_NODE_LABEL", "RealNode"]
