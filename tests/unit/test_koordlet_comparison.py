"""The pure part of the koordlet side-by-side comparison (tests/integration/koordlet_beside.py): reading a NodeMetric
into numbers and comparing two of them within ±5 % with absolute floors."""

from __future__ import annotations

from typing import Any

from tests.integration.koordlet_beside import MIB, Tolerances, compare, reading
from tests.objects import MakeNodeMetric


def status(node_cpu: str, pod_cpu: str, pod_memory: str, *, window: dict[str, Any] | None = None) -> dict[str, Any]:
    built = (
        MakeNodeMetric("n").updated("2026-11-28T05:00:00Z").node_usage(node_cpu, "4Gi").system("300m", "1Gi")
        .aggregated([{"duration": "1m0s", "usage": window or {"avg": {}}}])
        .pod("ns", "burner", pod_cpu, pod_memory).pod("ns", "idle", "2m", "10Mi").prod_reclaimable("1500m", "1Gi")
    )  # fmt: skip
    return {"status": built.status()}


def test_reading_takes_every_number_and_skips_cold_windows() -> None:
    r = reading(
        status("1200m", "400m", "160Mi", window={"avg": {"resources": {"cpu": "1", "memory": "4Gi"}}, "p99": {}})
    )
    assert r is not None
    assert r.node == (1.2, 4.0 * 1024 * MIB)
    assert r.pods["ns/burner"] == (0.4, 160.0 * MIB)
    assert r.windows == {("1m0s", "avg"): (1.0, 4.0 * 1024 * MIB)}  # p99 is cold: {}
    assert r.prod_reclaimable == (1.5, 1024.0 * MIB)
    assert reading({"status": {}}) is None


def test_within_five_percent_or_the_floor() -> None:
    ours = reading(status("1240m", "410m", "160Mi"))
    close = reading(status("1200m", "400m", "162Mi"))
    assert ours is not None and close is not None
    rows = {row.what: row for row in compare(ours, close, Tolerances())}
    assert rows["nodeUsage cpu"].ok and rows["podsMetric ns/burner cpu"].ok
    far = reading(status("1000m", "300m", "100Mi"))
    assert far is not None
    rows = {row.what: row for row in compare(ours, far, Tolerances())}
    assert not rows["nodeUsage cpu"].ok  # 24 % apart
    assert not rows["podsMetric ns/burner memory"].ok
    assert rows["podsMetric ns/idle cpu"].ok  # 2m against 2m; and a few millicores apart would be within the floor
