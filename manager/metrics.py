"""Prometheus metrics of the manager (`loadline_manager_*`), served on /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("loadline_manager_reconciles_total", "Node reconciles by result", ["result"])
RECONCILE_DURATION_SECONDS = Histogram(
    "loadline_manager_reconcile_duration_seconds",
    "Time of one node reconcile, API writes included",
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
)
QUEUE_DEPTH = Gauge("loadline_manager_queue_depth", "Nodes waiting to be reconciled")
OBJECT_WRITES = Counter(
    "loadline_manager_object_writes_total", "Writes to the API server by object kind and action", ["kind", "action"]
)
API_ERRORS = Counter(
    "loadline_manager_api_errors_total", "API writes that failed, by object kind and action", ["kind", "action"]
)
BATCH_NODES = Gauge(
    "loadline_manager_batch_nodes", "Nodes by the state of their batch resources (verdict)", ["verdict"]
)
# Per node, only while this replica leads and the node has batch resources (verdict Calculated): the series go
# with the node, with its batch resources (stale NodeMetric, colocation off) and with the Lease. Labelled like
# kube-state-metrics' kube_node_status_allocatable: {resource, unit}, unit "core" for cpu and "byte" for memory.
NODE_BATCH_ALLOCATABLE = Gauge(
    "loadline_manager_node_batch_allocatable",
    "Batch resources last computed for the node, in the unit of the unit label (core, byte); the Node status "
    "carries them once the change passes resourceDiffThreshold or updateTimeThresholdSeconds",
    ["node", "resource", "unit"],
)
NODE_MID_ALLOCATABLE = Gauge(
    "loadline_manager_node_mid_allocatable",
    "Mid resources (kubernetes.io/mid-cpu, mid-memory) last computed for the node, in the unit of the unit label; "
    "written to the Node status together with the batch resources",
    ["node", "resource", "unit"],
)
NODE_BATCH_RESOURCE_UNITS = {"cpu": "core", "memory": "byte"}
BATCH_SKIPPED_WRITES = Counter(
    "loadline_manager_batch_skipped_writes_total",
    "Batch resource changes not written (within resourceDiffThreshold and updateTimeThresholdSeconds)",
)
CONFIG_VALID = Gauge(
    "loadline_manager_config_valid", "1 when the last seen slo-controller-config was accepted, 0 when refused"
)
CONFIG_REJECTIONS = Counter(
    "loadline_manager_config_rejections_total",
    "Refused slo-controller-config values, by ConfigMap key and field (counted once per ConfigMap version)",
    ["key", "field"],
)
CONFIG_REJECTED = Gauge(
    "loadline_manager_config_rejected",
    "1 for every ConfigMap key and field the current slo-controller-config is refused for",
    ["key", "field"],
)
CONFIG_LAST_ACCEPTED = Gauge(
    "loadline_manager_config_last_accepted_timestamp_seconds", "When a slo-controller-config was last accepted"
)
