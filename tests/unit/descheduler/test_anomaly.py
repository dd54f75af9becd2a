from __future__ import annotations

from scheduler_plugin.descheduler.anomaly import AnomalyDetector, DetectorState, DetectorStore, detector_key
from scheduler_plugin.descheduler.args import DEFAULT_POOL_NAME, AnomalyCondition
from tests.unit.descheduler.builders import NOW, make_args, metric, node, rs_pod, run

DEFAULT = AnomalyCondition()  # 5 abnormalities, 3 normalities, 1m timeout


def test_anomalous_only_when_count_exceeds_consecutive_abnormalities() -> None:
    d = AnomalyDetector(DEFAULT)
    states = [d.mark(normal=False, now=float(i)) for i in range(6)]
    assert states == [DetectorState.OK] * 5 + [DetectorState.ANOMALY]


def test_a_normal_mark_breaks_the_abnormal_streak() -> None:
    d = AnomalyDetector(DEFAULT)
    for i in range(5):
        d.mark(normal=False, now=float(i))
    d.mark(normal=True, now=5.0)
    assert d.consecutive_abnormalities == 0
    states = [d.mark(normal=False, now=6.0 + i) for i in range(6)]
    assert states[-2] is DetectorState.OK and states[-1] is DetectorState.ANOMALY


def test_anomaly_expires_after_timeout_with_fresh_counters() -> None:
    d = AnomalyDetector(DEFAULT)
    for i in range(6):
        d.mark(normal=False, now=float(i))
    assert d.current_state(5.0 + 60.0) is DetectorState.ANOMALY  # until = 65, not yet before now
    assert d.current_state(65.5) is DetectorState.OK
    assert d.consecutive_abnormalities == 0
    assert d.mark(normal=False, now=66.0) is DetectorState.OK  # the count starts over


def test_anomaly_returns_to_ok_after_more_than_consecutive_normalities() -> None:
    d = AnomalyDetector(AnomalyCondition(timeout=3600))
    for i in range(6):
        d.mark(normal=False, now=float(i))
    states = [d.mark(normal=True, now=10.0 + i) for i in range(4)]
    assert states == [DetectorState.ANOMALY] * 3 + [DetectorState.OK]


def test_reset_clears_everything() -> None:
    d = AnomalyDetector(DEFAULT)
    for i in range(6):
        d.mark(normal=False, now=float(i))
    d.reset()
    assert d.state is DetectorState.OK and d.consecutive_abnormalities == 0


def test_store_forgets_detectors_after_cache_timeout() -> None:
    store = DetectorStore(cache_timeout=300)
    for i in range(5):
        assert not store.mark_abnormal("n1", DEFAULT, now=i * 60.0)
    # 5 minutes and a bit without a mark: the streak is forgotten.
    assert store.get("n1", now=4 * 60.0 + 301) is None
    assert len(store) == 0
    assert not store.mark_abnormal("n1", DEFAULT, now=4 * 60.0 + 302)


def test_consecutive_abnormalities_one_means_immediately() -> None:
    store = DetectorStore(cache_timeout=300)
    assert store.mark_abnormal("n1", AnomalyCondition(consecutive_abnormalities=1), now=0.0)


def hot_cluster() -> tuple[list, list, list]:  # type: ignore[type-arg]
    pods = [rs_pod(f"p{i}", "hot") for i in range(4)]
    nodes = [node("hot"), node("idle")]
    # hot: 500 + 4 * 2000 = 8500m = 85 % cpu
    metrics = [metric("hot", pods=[(p, 2000, 0.1e9) for p in pods]), metric("idle")]
    return nodes, pods, metrics


def test_node_hot_for_two_rounds_is_left_alone_and_the_sixth_round_evicts() -> None:
    args = make_args(anomalyCondition={"consecutiveAbnormalities": 5})
    nodes, pods, metrics = hot_cluster()
    store = DetectorStore(300)
    evictions = []
    for round_no in range(6):
        now = NOW + 60.0 * round_no
        metrics = [
            type(m)(m.node_name, now - 10, m.system_usage, m.pod_usages)  # fresh NodeMetric each round
            for m in metrics
        ]
        plan = run(args, nodes, pods, metrics, detectors=store, now=now)
        evictions.append(len(plan.evictions))
        if round_no < 5:
            assert plan.pools[0].stop_reason == "no hot node has been hot long enough (anomalyCondition)"
    assert evictions == [0, 0, 0, 0, 0, 1]


def test_a_cool_round_resets_the_streak() -> None:
    args = make_args(anomalyCondition={"consecutiveAbnormalities": 2})
    nodes, pods, hot_metrics = hot_cluster()
    store = DetectorStore(300)
    cool = [metric("hot", system_cpu=1000, age=0), metric("idle", age=0)]  # 10 %: low
    results = []
    for i, metrics in enumerate([hot_metrics, hot_metrics, cool, hot_metrics, hot_metrics, hot_metrics]):
        ms = [type(m)(m.node_name, NOW + i * 60 - 5, m.system_usage, m.pod_usages) for m in metrics]
        results.append(len(run(args, nodes, pods, ms, detectors=store, now=NOW + i * 60).evictions))
    # hot, hot (count 2, not > 2), cool (reset), hot 1, hot 2, hot 3 > 2 -> evicts
    assert results == [0, 0, 0, 0, 0, 1]


def test_a_normal_round_also_ends_the_streak() -> None:
    # Hot (85 %), hot, normal (60 %), hot, hot: with consecutiveAbnormalities 2 nothing is evicted,
    # because the streak is 2, 0, 1, 2 - never more than 2.
    args = make_args(anomalyCondition={"consecutiveAbnormalities": 2})
    nodes, pods, hot_metrics = hot_cluster()
    store = DetectorStore(300)
    normal = [metric("hot", system_cpu=6000, age=0), metric("idle", age=0)]
    results = []
    for i, metrics in enumerate([hot_metrics, hot_metrics, normal, hot_metrics, hot_metrics]):
        ms = [type(m)(m.node_name, NOW + i * 60 - 5, m.system_usage, m.pod_usages) for m in metrics]
        results.append(len(run(args, nodes, pods, ms, detectors=store, now=NOW + i * 60).evictions))
    assert results == [0, 0, 0, 0, 0]


def test_drained_node_starts_a_new_streak() -> None:
    args = make_args(anomalyCondition={"consecutiveAbnormalities": 2, "timeout": "10m"}, maxMigratingPerNode=10)
    nodes, pods, metrics = hot_cluster()
    store = DetectorStore(3600)
    for i in range(3):
        ms = [type(m)(m.node_name, NOW + i * 60 - 5, m.system_usage, m.pod_usages) for m in metrics]
        plan = run(args, nodes, pods, ms, detectors=store, now=NOW + i * 60)
    # Third round: anomalous, one 2000m pod out brings 85 % to 65 % -> the detector is reset.
    assert len(plan.evictions) == 1
    detector = store.get(detector_key(DEFAULT_POOL_NAME, "hot"), NOW + 120)
    assert detector is not None and detector.state is DetectorState.OK


def test_store_from_args_uses_the_effective_cache_timeout() -> None:
    assert DetectorStore.from_args(make_args()).cache_timeout == 300.0
    assert (
        DetectorStore.from_args(make_args(detectorCacheTimeout="30s", deschedulingInterval="2m")).cache_timeout == 120
    )


def test_overlapping_pools_keep_separate_streaks() -> None:
    # The top-level pool (high 90 %) covers every node and sees "hot" (85 %) as normal; the "strict"
    # pool (high 75 %) sees it hot. The first pool's reset must not erase the second pool's streak.
    args = make_args(
        highThresholds={"cpu": 90, "memory": 90},
        anomalyCondition={"consecutiveAbnormalities": 2},
        nodePools=[{"name": "strict", "nodeSelector": {"matchLabels": {}}, "highThresholds": {"cpu": 75}}],
    )
    nodes, pods, metrics = hot_cluster()
    store = DetectorStore(300)
    results = []
    for i in range(3):
        ms = [type(m)(m.node_name, NOW + i * 60 - 5, m.system_usage, m.pod_usages) for m in metrics]
        plan = run(args, nodes, pods, ms, detectors=store, now=NOW + i * 60)
        results.append([(e.pool, e.pod.node_name) for e in plan.evictions])
    assert results == [[], [], [("strict", "hot")]]
