"""Prometheus metrics of the agent's QoS enforcement (`loadline_agent_qos_*`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

ENABLED = Gauge("loadline_agent_qos_enabled", "1 while the node's NodeSLO enables BE suppress/evict")
SUPPRESS_CORES = Gauge("loadline_agent_qos_be_suppress_cores", "CPU best-effort pods may use (last computed)")
CFS_QUOTA_CORES = Gauge(
    "loadline_agent_qos_be_cfs_quota_cores", "CFS quota of the besteffort cgroup in cores (-1: unlimited)"
)
CPUSET_CPUS = Gauge("loadline_agent_qos_be_cpuset_cpus", "CPUs in the besteffort cgroup's cpuset")
ACTIONS = Counter(
    "loadline_agent_qos_actions_total",
    "Enforcement actions: cfs_quota_set, cfs_quota_restored, cpuset_set, cpuset_restored, evicted, evict_failed",
    ["action"],
)
SKIPPED_ROUNDS = Counter(
    "loadline_agent_qos_skipped_rounds_total", "Enforcement rounds that could not act, by reason", ["reason"]
)
ERRORS = Counter("loadline_agent_qos_errors_total", "Failures while enforcing, by what failed", ["what"])
