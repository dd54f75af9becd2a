"""The pure parts of bench/cluster_scale_bench.py: its workload, when a hot node counts as avoided, and how the
meter counts requests per client and bytes per process."""

from __future__ import annotations

from collections import Counter

from bench.cluster_scale_bench import workload
from bench.cluster_scale_meter import Snapshot as MeterSnapshot
from bench.cluster_scale_meter import SocketTally, component_of, parse_ss, request_key, window
from bench.cluster_scale_report import avoided_since


def test_workload_mixes_services_batch_and_whole_gangs_in_waves() -> None:
    waves = workload(1000, 4, seed=7, prefix="w0")
    specs = [s for wave in waves for s in wave]
    assert len(specs) == 1000 and len(waves) == 4
    kinds = Counter(s.kind for s in specs)
    # draws of 60 % a service, 30 % a batch pod, 10 % a gang of 4: pods 6 : 3 : 4
    assert 0.40 < kinds["service"] / 1000 < 0.52 and 0.18 < kinds["batch"] / 1000 < 0.28
    assert 0.25 < kinds["gang"] / 1000 < 0.37
    for wave in waves:  # a gang is never split across two waves
        gangs = Counter(s.gang for s in wave if s.gang)
        assert set(gangs.values()) == {4}
    assert len({s.name for s in specs}) == 1000


def test_a_node_is_avoided_from_the_first_of_three_refused_probes_with_none_bound_after() -> None:
    assert avoided_since([(1, True), (2, False), (3, False)]) is None  # only two refused
    assert avoided_since([(1, True), (2, False), (3, False), (4, False)]) == 2
    assert avoided_since([(1, False), (2, False), (3, True), (4, False), (5, False), (6, False)]) == 4
    assert avoided_since([(1, False), (2, False), (3, False), (4, True)]) is None  # bound again


def test_requests_are_counted_per_client_verb_and_resource() -> None:
    watch = {"verb": "watch", "stage": "ResponseStarted", "objectRef": {"resource": "pods"}}
    assert request_key(watch) == "watch pods"
    assert request_key({**watch, "stage": "ResponseComplete"}) is None  # a watch counts once, when it starts
    status = {"verb": "update", "stage": "ResponseComplete",
              "objectRef": {"resource": "nodemetrics", "subresource": "status"}}  # fmt: skip
    assert request_key(status) == "update nodemetrics/status"
    assert request_key({"verb": "get", "stage": "ResponseComplete"}) is None  # /healthz, discovery
    assert component_of("koord-scheduler/v1.8.0 (linux/amd64)") == "scheduler"
    assert component_of("loadline-manager/0.1 python") == "manager"
    assert component_of("curl/8") == "other"


def test_bytes_per_process_survive_closed_and_reused_connections() -> None:
    text = ("0 0 127.0.0.1:5000 127.0.0.1:6443 users:((\"python\",pid=10,fd=3))\n"
            "\t cubic bytes_acked:100 bytes_received:1000\n")  # fmt: skip
    assert parse_ss(text) == {"127.0.0.1:5000": (10, 100, 1000)}
    tally = SocketTally()
    tally.update({"a": (10, 100, 1000)})
    tally.update({"a": (10, 150, 1200)})
    tally.update({"a": (11, 5, 7)})  # port reused by another process: the first connection's count is kept
    tally.update({})  # closed
    assert tally.totals() == Counter({(10, "sent"): 150, (10, "received"): 1200, (11, "sent"): 5, (11, "received"): 7})


def test_a_window_is_the_difference_of_two_snapshots() -> None:
    a = MeterSnapshot(10.0, {"p": 1.0}, {"p": (5, 6)}, Counter({("manager", "get pods"): 2}), Counter(),
                      Counter({"get pods": 5}))  # fmt: skip
    b = MeterSnapshot(20.0, {"p": 3.0}, {"p": (7, 8)}, Counter({("manager", "get pods"): 12}), Counter(),
                      Counter({"get pods": 25, "list nodes": 1}))  # fmt: skip
    w = window(a, b)
    assert w.seconds == 10 and w.cpu == {"p": 2.0} and w.rss == {"p": (7, 8)}
    assert w.rate("manager") == 1.0
    assert w.served == Counter({"get pods": 20, "list nodes": 1})
