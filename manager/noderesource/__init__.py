"""Batch (overcommit) resources per node: Koordinator's noderesource BatchResource plugin as pure functions."""
