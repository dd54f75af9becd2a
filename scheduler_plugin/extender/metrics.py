"""Prometheus metrics of the extender (`loadline_extender_*`), served on /metrics with the
client plumbing's `loadline_kube_*` metrics from the same default registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter(
    "loadline_extender_requests_total", "Extender HTTP requests by verb and HTTP status code", ["verb", "code"]
)
BAD_REQUESTS = Counter(
    "loadline_extender_bad_requests_total", "Requests answered 400 because the body was malformed", ["verb"]
)
INTERNAL_ERRORS = Counter(
    "loadline_extender_internal_errors_total", "Requests that failed on an unexpected exception (HTTP 500)", ["verb"]
)
PLUGIN_ERRORS = Counter(
    "loadline_extender_plugin_errors_total", "Requests a plugin could not answer (Error status or exception)", ["verb"]
)
NOT_READY = Counter(
    "loadline_extender_not_ready_total", "Requests refused because the caches had not synced yet", ["verb"]
)
LATENCY = Histogram(
    "loadline_extender_request_duration_seconds",
    "Time to answer one filter/prioritize request (parse, plugins, encode)",
    ["verb"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
NODES_PER_REQUEST = Histogram(
    "loadline_extender_request_nodes",
    "Candidate nodes per request",
    ["verb"],
    buckets=(1, 5, 10, 50, 100, 500, 1000, 5000, 15000),
)
FILTERED_NODES = Counter("loadline_extender_filter_nodes_total", "Nodes the filter passed or failed", ["result"])
PREEMPT_CANDIDATES = Counter(
    "loadline_extender_preempt_candidates_total",
    "Candidate nodes of kube-scheduler's preemption: kept (our filters accept the victims), dropped, unknown",
    ["result"],
)
REJECTIONS = Counter("loadline_extender_filter_rejections_total", "Nodes rejected, by Filter plugin", ["plugin"])
UNKNOWN_NODES = Counter(
    "loadline_extender_unknown_nodes_total", "Requested nodes missing from the extender's cache (passed unchecked)"
)
CACHE_OBJECTS = Gauge("loadline_extender_cache_objects", "Objects in the extender's cache, by kind", ["kind"])
CACHE_SYNCED = Gauge("loadline_extender_cache_synced", "1 once nodes, pods and NodeMetrics have been listed")
PROVISIONAL = Counter(
    "loadline_extender_provisional_placements_total",
    "Pods counted on our best-scored node until their binding is seen, by outcome "
    "(assumed; then confirmed = kube-scheduler chose that node, moved = another one, expired, released, "
    "evicted = the oldest past MAX_PROVISIONAL)",
    ["outcome"],
)

# 0 from the start: the error panels and rate() show 0 rather than no data until the first request or error.
for _verb in ("filter", "prioritize", "preempt"):
    for _counter in (BAD_REQUESTS, INTERNAL_ERRORS, PLUGIN_ERRORS, NOT_READY):
        _counter.labels(_verb)
for _result in ("passed", "failed"):
    FILTERED_NODES.labels(_result)
for _outcome in ("assumed", "confirmed", "moved", "expired", "released", "evicted"):
    PROVISIONAL.labels(_outcome)
