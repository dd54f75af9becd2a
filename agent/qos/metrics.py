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

# --- batch resource isolation (agent.qos.batch_isolation)
BATCH_MODE = Gauge(
    "loadline_agent_qos_batch_isolation", "1 for the batch isolation mode in use: on, dry-run or off", ["mode"]
)
BATCH_PODS = Gauge("loadline_agent_qos_batch_pods", "Batch pods whose cgroups were held to their batch resources")
BATCH_WRITES = Counter(
    "loadline_agent_qos_batch_cgroup_writes_total",
    "Batch pod cgroup values that differed from their batch resources, by resource (cpu_shares, cfs_quota, "
    "memory_limit), level (pod, container) and result: set; dry_run (would have been set); deferred (a memory limit "
    "below the working set); refused (the kernel said no); gone (the cgroup was removed meanwhile)",
    ["resource", "level", "result"],
)
BATCH_POD_PROBLEMS = Counter(
    "loadline_agent_qos_batch_pod_problems_total",
    "Batch pods the agent could not hold as they ask, once per pod and problem: malformed (unreadable batch "
    "resources), not_best_effort (a non-BE QoS label), above_node_capacity (held to the node's), unsafe_path",
    ["reason"],
)
