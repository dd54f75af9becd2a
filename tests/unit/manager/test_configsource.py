"""slo-controller-config as the manager sees it: accepted, refused (last good stays), reported once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client import REGISTRY

from common.kube.events import EventRecorder
from manager.configsource import REASON_REJECTED, SLOConfigSource
from tests.unit.manager.fakes import FakeHTTP

KEY = "resource-threshold-config"
FIELD = "clusterStrategy.cpuSuppressThresholdPercent"


def configmap(data: dict[str, str], rv: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "slo-controller-config",
            "namespace": "loadline-system",
            "uid": "u1",
            "resourceVersion": rv,
        },
        "data": data,
    }


def threshold(percent: int) -> dict[str, str]:
    return {KEY: json.dumps({"clusterStrategy": {"enable": True, "cpuSuppressThresholdPercent": percent}})}


def flagged(field: str) -> float | None:
    return REGISTRY.get_sample_value("loadline_manager_config_rejected", {"key": KEY, "field": field})


def test_accepted_then_refused_keeps_the_last_good_config_and_flags_key_and_field() -> None:
    changes: list[int] = []
    source = SLOConfigSource("loadline-system", "slo-controller-config", on_change=lambda: changes.append(1))
    source.handle("ADDED", configmap(threshold(55)), None)
    good = source.current
    assert good is not None and good.resource_threshold.cluster["cpuSuppressThresholdPercent"] == 55
    assert changes == [1]

    source.handle("MODIFIED", configmap(threshold(150), "2"), None)
    assert source.current is good  # last good stays in force
    assert changes == [1]
    assert source.rejection is not None
    [error] = source.rejection.errors
    assert (error.key, error.field) == (KEY, FIELD)
    assert "150" in source.rejection.note()
    assert flagged(FIELD) == 1
    assert REGISTRY.get_sample_value("loadline_manager_config_valid") == 0

    source.handle("MODIFIED", configmap({KEY: '{"clusterStrategy": '}, "3"), None)  # broken JSON
    assert source.current is good
    assert flagged(FIELD) == 0 and flagged("") == 1
    assert "invalid JSON" in source.rejection.note()  # type: ignore[union-attr]

    source.handle("MODIFIED", configmap(threshold(60), "4"), None)
    assert source.current is not good and source.current is not None
    assert source.current.resource_threshold.cluster["cpuSuppressThresholdPercent"] == 60
    assert source.rejection is None and flagged("") == 0
    assert REGISTRY.get_sample_value("loadline_manager_config_valid") == 1
    assert changes == [1, 1]


def test_unchanged_data_is_not_reparsed_and_a_missing_configmap_means_defaults() -> None:
    changes: list[int] = []
    source = SLOConfigSource("ns", "cm", on_change=lambda: changes.append(1))
    source.missing()
    assert source.ready and source.current is not None
    assert source.current.colocation.cluster["enable"] is False  # Koordinator's defaults
    source.handle("ADDED", configmap(threshold(55)), None)
    source.handle("MODIFIED", configmap(threshold(55), "9"), None)  # e.g. a label edit: same data
    assert changes == [1, 1]
    source.handle("DELETED", configmap(threshold(55)), None)
    assert source.current.resource_threshold.cluster["cpuSuppressThresholdPercent"] == 65  # type: ignore[union-attr]


def test_starting_on_a_broken_configmap_holds_off_instead_of_applying_defaults() -> None:
    source = SLOConfigSource("ns", "cm")
    source.handle("ADDED", configmap(threshold(101)), None)
    source.missing()  # the sync after the list must not turn "refused" into "defaults"
    assert not source.ready and source.current is None


def test_the_rejection_event_is_written_once_per_refused_version() -> None:
    async def body() -> list[dict[str, Any]]:
        http = FakeHTTP()
        recorder = EventRecorder(http.as_kube(), "loadline-manager", "test")
        source = SLOConfigSource("loadline-system", "slo-controller-config")
        source.handle("ADDED", configmap(threshold(150)), None)
        await source.report(recorder)
        await source.report(recorder)  # same version: no second event
        source.handle("MODIFIED", configmap({KEY: "{"}, "2"), None)
        await source.report(recorder)
        return [body for method, path, body in http.calls if method == "POST" and path.endswith("/events")]

    events = asyncio.run(body())
    assert len(events) == 2
    assert all(e["reason"] == REASON_REJECTED and e["type"] == "Warning" for e in events)
    assert events[0]["regarding"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "slo-controller-config",
        "namespace": "loadline-system",
        "uid": "u1",
    }
    assert FIELD in events[0]["note"] and KEY in events[1]["note"]
