"""Prometheus metrics of the descheduler (``loadline_descheduler_*``), on the default registry so
/metrics also shows the reflectors' and the leader elector's series."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ROUNDS = Counter(
    "loadline_descheduler_rounds_total",
    "Rounds by outcome: ok, error (the round raised; the loop went on), paused, not_synced (caches not ready)",
    ["result"],
)
ROUND_DURATION = Histogram(
    "loadline_descheduler_round_duration_seconds",
    "Wall time of one round by phase: plan (in-process) and total (plan plus evictions)",
    ["phase"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
NODES = Gauge(
    "loadline_descheduler_nodes",
    "Nodes per class in the last round, per node pool (low, both_low, normal, high, prod_low, prod_high, anomalous)",
    ["pool", "class"],
)
NODES_SKIPPED = Gauge(
    "loadline_descheduler_nodes_skipped",
    "Nodes left out of the last round, by reason (missing, expired, malformed, ...)",
    ["reason"],
)
NODE_SKIPS = Counter(
    "loadline_descheduler_node_skips_total",
    "Node-rounds skipped, by reason (a node skipped for three rounds counts three)",
    ["reason"],
)
PODS_CONSIDERED = Counter(
    "loadline_descheduler_pods_considered_total", "Pods on hot nodes examined as eviction candidates"
)
PODS_SKIPPED = Counter(
    "loadline_descheduler_pods_skipped_total", "Candidate pods not planned for eviction, by reason", ["reason"]
)
EVICTIONS = Counter(
    "loadline_descheduler_evictions_total",
    "Eviction attempts by result (evicted, dry_run, refused, gone, failed) and reason: the trigger for "
    "evicted/dry_run, why it did not happen otherwise",
    ["result", "reason"],
)
for _result in ("ok", "error", "paused", "not_synced"):
    ROUNDS.labels(_result)  # 0 from the start: panels and rate() show 0 rather than no data
LAST_ROUND = Gauge("loadline_descheduler_last_round_timestamp_seconds", "When the last round finished (epoch)")
