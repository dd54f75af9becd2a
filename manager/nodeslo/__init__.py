"""The `slo-controller-config` ConfigMap: parsing, validation, merge and per-node NodeSLO/NodeMetric rendering."""
