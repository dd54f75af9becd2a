"""`make demo`'s Prometheus targets and its page of graphs, from numbers (tests/harness/demo_monitoring.py)."""

from __future__ import annotations

import urllib.parse

from tests.harness.demo_monitoring import JOBS, QUERIES, graph_url, scrape_targets


def _slice(service: str, port: int, *endpoints: dict[str, object], port_name: str = "metrics") -> dict[str, object]:
    return {"metadata": {"labels": {"kubernetes.io/service-name": service}},
            "ports": [{"name": port_name, "port": port, "protocol": "TCP"}], "endpoints": list(endpoints)}  # fmt: skip


def test_targets_are_the_services_endpoints_with_the_agents_node() -> None:
    targets = scrape_targets([
        _slice("loadline-agent", 9321, {"addresses": ["192.168.1.7"], "nodeName": "real-0",
                                        "conditions": {"ready": True}}),
        _slice("loadline-scheduler", 10251, {"addresses": ["10.244.77.5"], "nodeName": "real-0"},
               {"addresses": ["10.244.77.6"], "nodeName": "real-0", "conditions": {"ready": False}}),
        _slice("loadline-manager", 8080, {"addresses": ["fd00::5"], "nodeName": "real-0"}),
        _slice("loadline-webhook", 443, {"addresses": ["10.244.77.9"]}),  # not a metrics Service
        _slice("loadline-descheduler", 10252, {"addresses": ["10.244.77.8"]}, port_name="http"),  # no metrics port
    ])  # fmt: skip
    assert set(targets) == set(JOBS)
    assert targets["loadline-agent"] == [{"targets": ["192.168.1.7:9321"], "labels": {"node": "real-0"}}]
    assert targets["loadline-scheduler"] == [{"targets": ["10.244.77.5:10251"], "labels": {}}]  # the unready one left
    assert targets["loadline-manager"] == [{"targets": ["[fd00::5]:8080"], "labels": {}}]
    assert targets["loadline-descheduler"] == [] and targets["loadline-extender"] == []


def test_the_page_of_graphs_holds_every_query() -> None:
    url = graph_url("http://127.0.0.1:9090")
    assert url.startswith("http://127.0.0.1:9090/graph?")
    params = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert [params[f"g{i}.expr"][0] for i in range(len(QUERIES))] == [q.expr for q in QUERIES]
    assert all(params[f"g{i}.tab"] == ["0"] for i in range(len(QUERIES)))
