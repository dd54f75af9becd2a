"""Framework runtime: extension-point order, Unreserve semantics, scoring arithmetic, FitError text."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from scheduler_plugin.framework.binder import InMemoryBinder
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.diagnosis import Diagnosis
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult, Rejection
from scheduler_plugin.framework.interfaces import PostFilterResult, PreFilterResult, default_normalize_score
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.schedule_one import (
    binding_cycle,
    num_feasible_nodes_to_find,
    rollback,
    scheduling_cycle,
)
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Code, Status
from tests.objects import node, pod


class Recorder:
    """A configurable plugin that logs every call as "<name>.<point>"."""

    def __init__(self, name: str, log: list[str], **behaviour: Any) -> None:
        self.name = name
        self.log = log
        self.b = behaviour

    def pre_filter(self, state: CycleState, p: PodInfo, snap: Snapshot) -> tuple[PreFilterResult | None, Status]:
        self.log.append(f"{self.name}.PreFilter")
        return self.b.get("pre_filter_result"), self.b.get("pre_filter", SUCCESS)

    def filter(self, state: CycleState, p: PodInfo, snap: Snapshot, rows: IndexArray) -> FilterResult:
        self.log.append(f"{self.name}.Filter")
        fn = self.b.get("filter")
        return fn(snap, rows) if fn else ALL_PASS

    def post_filter(self, state: CycleState, p: PodInfo, snap: Snapshot, d: Diagnosis) -> tuple[PostFilterResult | None, Status]:
        self.log.append(f"{self.name}.PostFilter")
        return None, self.b.get("post_filter", Status.unschedulable())

    def pre_score(self, state: CycleState, p: PodInfo, snap: Snapshot, rows: IndexArray) -> Status:
        self.log.append(f"{self.name}.PreScore")
        return self.b.get("pre_score", SUCCESS)

    def score(self, state: CycleState, p: PodInfo, snap: Snapshot, rows: IndexArray) -> IntArray:
        self.log.append(f"{self.name}.Score")
        fn = self.b.get("score")
        return fn(snap, rows) if fn else np.zeros(rows.size, np.int64)

    def reserve(self, state: CycleState, p: PodInfo, node_name: str) -> Status:
        self.log.append(f"{self.name}.Reserve")
        return self.b.get("reserve", SUCCESS)

    def unreserve(self, state: CycleState, p: PodInfo, node_name: str) -> None:
        self.log.append(f"{self.name}.Unreserve")

    def permit(self, state: CycleState, p: PodInfo, node_name: str) -> tuple[Status, float]:
        self.log.append(f"{self.name}.Permit")
        return self.b.get("permit", (SUCCESS, 0.0))

    async def pre_bind(self, state: CycleState, p: PodInfo, node_name: str) -> Status:
        self.log.append(f"{self.name}.PreBind")
        return self.b.get("pre_bind", SUCCESS)

    async def bind(self, state: CycleState, p: PodInfo, node_name: str) -> Status:
        self.log.append(f"{self.name}.Bind")
        return self.b.get("bind", SUCCESS)

    def post_bind(self, state: CycleState, p: PodInfo, node_name: str) -> None:
        self.log.append(f"{self.name}.PostBind")


ALL_POINTS = ("preFilter", "filter", "postFilter", "preScore", "score", "reserve", "permit", "preBind", "bind", "postBind")


def make(plugins: list[Recorder], nodes: int = 3, weights: dict[str, int] | None = None,
         points: tuple[str, ...] = ALL_POINTS) -> tuple[Framework, Snapshot, FakeClock]:
    snap = Snapshot.from_objects(nodes=[node(f"n{i}") for i in range(nodes)])
    clock = FakeClock()
    fw = Framework("test", snapshot=snap, clock=clock, binder=InMemoryBinder())
    fw.set_plugins({p: list(plugins) for p in points}, weights or {})
    return fw, snap, clock


def test_extension_points_run_in_order_and_binding_follows() -> None:
    log: list[str] = []
    fw, snap, _ = make([Recorder("A", log), Recorder("B", log)])
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.is_success()
    assert log == [
        "A.PreFilter", "B.PreFilter", "A.Filter", "B.Filter", "A.PreScore", "B.PreScore",
        "A.Score", "B.Score", "A.Reserve", "B.Reserve", "A.Permit", "B.Permit",
    ]
    log.clear()
    assert asyncio.run(binding_cycle(fw, result)).is_success()
    # Bind stops at the first non-Skip binder.
    assert log == ["A.PreBind", "B.PreBind", "A.Bind", "A.PostBind", "B.PostBind"]
    assert snap.node_of("default/p") == result.node_name
    assert not snap.records["default/p"].assumed


def test_reserve_failure_unreserves_all_in_reverse_order_and_forgets_pod() -> None:
    log: list[str] = []
    fw, snap, _ = make([Recorder("A", log), Recorder("B", log, reserve=Status.unschedulable("no room in B")),
                        Recorder("C", log)], points=("reserve",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert log == ["A.Reserve", "B.Reserve", "C.Unreserve", "B.Unreserve", "A.Unreserve"]
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message == "0/1 nodes are available: 1 no room in B."
    assert snap.records == {}
    assert snap.requested.sum() == 0


def test_permit_rejection_unreserves_and_releases() -> None:
    log: list[str] = []
    fw, snap, _ = make([Recorder("A", log, permit=(Status.unschedulable("denied"), 0.0))], points=("reserve", "permit"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert log == ["A.Reserve", "A.Permit", "A.Unreserve"]
    assert result.status.is_rejected() and result.node_name is None
    assert snap.records == {}


def test_bind_failure_unreserves_and_forgets() -> None:
    log: list[str] = []
    fw, snap, _ = make([Recorder("A", log, bind=Status.error("apiserver said no"))], points=("reserve", "bind"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert snap.node_of("default/p") is not None
    status = asyncio.run(binding_cycle(fw, result))
    assert status.code is Code.ERROR and "apiserver said no" in status.message
    assert log[-1] == "A.Unreserve"
    assert snap.records == {}


def test_bind_skip_falls_through_to_next_binder() -> None:
    log: list[str] = []
    fw, _, _ = make([Recorder("A", log, bind=Status.skip()), Recorder("B", log)], points=("bind",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert asyncio.run(binding_cycle(fw, result)).is_success()
    assert log == ["A.Bind", "B.Bind"]


def test_prefilter_skip_skips_that_plugins_filter_only() -> None:
    log: list[str] = []
    fw, _, _ = make([Recorder("A", log, pre_filter=Status.skip()), Recorder("B", log)], points=("preFilter", "filter"))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert log == ["A.PreFilter", "B.PreFilter", "B.Filter"]


def test_prescore_skip_skips_score() -> None:
    log: list[str] = []
    fw, _, _ = make([Recorder("A", log, pre_score=Status.skip()), Recorder("B", log)], points=("preScore", "score"))
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert log == ["A.PreScore", "B.PreScore", "B.Score"]


def test_filter_sees_only_survivors_and_fit_error_counts_first_rejecting_plugin() -> None:
    log: list[str] = []
    seen: list[list[int]] = []

    def reject_n0_n1(snap: Snapshot, rows: IndexArray) -> FilterResult:
        seen.append(rows.tolist())
        names = np.array([snap.node_name(r) for r in rows])
        return FilterResult.from_rejections(rows.size, [
            Rejection("Insufficient cpu", np.isin(names, ["n0", "n1"])),
            Rejection("Insufficient memory", names == "n0"),
        ])

    def reject_rest(snap: Snapshot, rows: IndexArray) -> FilterResult:
        seen.append(rows.tolist())
        return FilterResult.reject_all(rows.size, "node(s) had untolerated taint {a: b}", Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    fw, _, _ = make([Recorder("A", log, filter=reject_n0_n1), Recorder("B", log, filter=reject_rest)],
                    nodes=4, points=("filter", "postFilter"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert seen == [[0, 1, 2, 3], [2, 3]]
    assert result.status.code is Code.UNSCHEDULABLE
    # kube-scheduler: "count reason" sorted as strings, joined by ", ", each block ends with "."
    assert result.status.message == (
        "0/4 nodes are available: 1 Insufficient memory, 2 Insufficient cpu, "
        "2 node(s) had untolerated taint {a: b}."
    )
    assert log.count("A.PostFilter") == 1 and log.count("B.PostFilter") == 1
    assert result.diagnosis is not None
    assert result.diagnosis.unschedulable_plugins == {"A", "B"}


def test_prefilter_rejection_message_and_postfilter_message() -> None:
    log: list[str] = []
    fw, snap, _ = make([
        Recorder("A", log, pre_filter=Status.unresolvable("pre-filter says no")),
        Recorder("B", log, post_filter=Status.unschedulable("preemption: not helpful")),
    ], nodes=5, points=("preFilter", "filter", "postFilter"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.message == "0/5 nodes are available: pre-filter says no. preemption: not helpful"
    assert "A.Filter" not in log and "B.PreFilter" not in log  # PreFilter stops at the first rejection
    assert snap.records == {}


def test_an_error_of_postfilter_is_said_in_the_fit_error_and_the_pod_stays_unschedulable() -> None:
    """kube-scheduler's schedulingCycle: RunPostFilterPlugins' Error (e.g. a Filter failing in preemption's
    simulation) is logged and becomes the FitError's PostFilter message, in the plugin's own words; the pod is
    Unschedulable, not failed (found by the differential test: an in-tree PV that cannot be translated)."""
    log: list[str] = []
    fw, _, _ = make([
        Recorder("A", log, filter=lambda snap, rows: FilterResult.reject_all(rows.size, "nope")),
        Recorder("B", log, post_filter=Status.error("preemption: the simulation failed")),
    ], nodes=2, points=("filter", "postFilter"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.code is Code.UNSCHEDULABLE
    assert result.status.message == "0/2 nodes are available: 2 nope. preemption: the simulation failed"
    assert not result.nominated_node_name


def test_prefilter_result_narrows_candidates_and_counts_absent_nodes() -> None:
    log: list[str] = []
    rows_seen: list[list[int]] = []

    def spy(snap: Snapshot, rows: IndexArray) -> FilterResult:
        rows_seen.append(rows.tolist())
        return FilterResult.reject_all(rows.size, "nope")

    fw, _, _ = make([Recorder("A", log, pre_filter_result=PreFilterResult(frozenset({"n1", "ghost"})), filter=spy)],
                    nodes=3, points=("preFilter", "filter"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert rows_seen == [[1]]
    assert result.status.message == "0/3 nodes are available: 1 nope, 2 node(s) didn't satisfy plugin(s) [A]."


def test_prefilter_results_that_do_not_intersect_reject_the_pod() -> None:
    fw, _, _ = make([
        Recorder("A", [], pre_filter_result=PreFilterResult(frozenset({"n0"}))),
        Recorder("B", [], pre_filter_result=PreFilterResult(frozenset({"n1"}))),
    ], points=("preFilter",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.message == "0/3 nodes are available: node(s) didn't satisfy plugin(s) [A B] simultaneously."


def test_scores_are_normalised_weighted_and_summed() -> None:
    class Normalizing(Recorder):
        def normalize_score(self, state: CycleState, p: PodInfo, scores: IntArray) -> IntArray:
            return default_normalize_score(scores)

    raw_a = {0: 10, 1: 40, 2: 20}  # normalised: 25, 100, 50
    raw_b = {0: 90, 1: 10, 2: 60}  # used as is
    a = Normalizing("A", [], score=lambda s, rows: np.array([raw_a[int(r)] for r in rows], np.int64))
    b = Recorder("B", [], score=lambda s, rows: np.array([raw_b[int(r)] for r in rows], np.int64))
    fw, _, _ = make([a, b], weights={"A": 2, "B": 1}, points=("score",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")), record=True)
    # totals: n0 = 2*25 + 90 = 140, n1 = 2*100 + 10 = 210, n2 = 2*50 + 60 = 160
    assert result.scores is not None and result.scores.totals is not None
    assert result.scores.totals.tolist() == [140, 210, 160]
    assert result.scores.normalized["A"].tolist() == [25, 100, 50]
    assert result.node_name == "n1"


def test_ties_are_broken_at_random_among_the_best_nodes_and_a_seed_repeats_the_choices() -> None:
    def choices(seed: int) -> list[str]:
        snap = Snapshot.from_objects(nodes=[node("zeta"), node("alpha"), node("mid"), node("low")])
        fw = Framework("t", snapshot=snap, clock=FakeClock(), binder=InMemoryBinder(), rng=random.Random(seed))
        low = snap.node_by_name("low")
        assert low is not None
        fw.set_plugins({"score": [Recorder("A", [], score=lambda s, rows: np.where(rows == low.index, 6, 7))]}, {})
        out = []
        for i in range(60):
            result = scheduling_cycle(fw, PodInfo.from_dict(pod(f"p{i}")))
            assert result.tied_nodes == 3
            out.append(result.node_name or "")
        return out

    first = choices(1)
    assert set(first) == {"zeta", "alpha", "mid"}  # every best node is picked sometimes, "low" never
    assert all(first.count(name) >= 10 for name in ("zeta", "alpha", "mid"))
    assert choices(1) == first
    assert choices(2) != first


def test_out_of_range_score_is_an_error_and_nothing_is_assumed() -> None:
    fw, snap, _ = make([Recorder("A", [], score=lambda s, rows: np.full(rows.size, 101, np.int64))], points=("score",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.code is Code.ERROR
    assert "returns an invalid score 101, it should in the range of [0, 100]" in result.status.message
    assert snap.records == {}


def test_plugin_exception_becomes_error_status() -> None:
    def boom(snap: Snapshot, rows: IndexArray) -> FilterResult:
        raise RuntimeError("kaboom")

    fw, _, _ = make([Recorder("A", [], filter=boom)], points=("filter",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.code is Code.ERROR and "kaboom" in result.status.message


def test_single_feasible_node_is_taken_without_scoring() -> None:
    log: list[str] = []
    only_n2 = Recorder("A", log, filter=lambda s, rows: FilterResult.rejecting("x", rows != 2))
    fw, _, _ = make([only_n2], points=("filter", "score"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.node_name == "n2" and "A.Score" not in log


def test_no_nodes_is_an_error() -> None:
    fw = Framework("t", snapshot=Snapshot(), clock=FakeClock())
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.code is Code.ERROR and result.status.message == "no nodes available to schedule pods"


@pytest.mark.parametrize(("percentage", "nodes", "expected"), [
    (None, 5000, 500), (100, 5000, 5000), (0, 50, 50), (0, 1000, 420), (0, 5000, 500), (0, 6000, 300),
    (0, 15000, 750), (30, 200, 100), (30, 1000, 300),
])
def test_num_feasible_nodes_to_find(percentage: int | None, nodes: int, expected: int) -> None:
    assert num_feasible_nodes_to_find(percentage, nodes) == expected


def test_sampling_scores_only_the_wanted_number_of_nodes() -> None:
    seen: list[int] = []

    def count(snap: Snapshot, rows: IndexArray) -> IntArray:
        seen.append(rows.size)
        return np.zeros(rows.size, np.int64)

    snap = Snapshot.from_objects(nodes=[node(f"n{i:04d}") for i in range(1000)])
    fw = Framework("t", snapshot=snap, clock=FakeClock(), percentage_of_nodes_to_score=0)
    fw.set_plugins({"score": [Recorder("A", [], score=count)]}, {})
    scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert seen == [420]


def test_search_stops_at_enough_feasible_nodes_and_rotates() -> None:
    """1000 nodes, odd rows infeasible: 420 feasible nodes are needed, found in rotating windows."""
    examined: list[int] = []

    def odd_rows_fail(snap: Snapshot, rows: IndexArray) -> FilterResult:
        examined.extend(rows.tolist())
        return FilterResult.rejecting("odd", rows % 2 == 1)

    scored: list[IndexArray] = []

    def capture(snap: Snapshot, rows: IndexArray) -> IntArray:
        scored.append(rows)
        return np.zeros(rows.size, np.int64)

    snap = Snapshot.from_objects(nodes=[node(f"n{i:04d}") for i in range(1000)])
    fw = Framework("t", snapshot=snap, clock=FakeClock())
    fw.set_plugins({"filter": [Recorder("F", [], filter=odd_rows_fail)], "score": [Recorder("S", [], score=capture)]}, {})
    first = scheduling_cycle(fw, PodInfo.from_dict(pod("p0")))
    assert first.feasible_nodes == 420 and scored[-1].size == 420
    assert first.evaluated_nodes == 839  # 420 even rows found by row 838
    assert (scored[-1] % 2 == 0).all()
    examined.clear()
    scheduling_cycle(fw, PodInfo.from_dict(pod("p1")))
    assert examined[0] == 839  # the next search starts where the last one stopped
    fw.set_plugins({"filter": [Recorder("F", [], filter=lambda s, rows: FilterResult.reject_all(rows.size, "no"))]}, {})
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p2")))
    assert result.status.message == "0/1000 nodes are available: 1000 no."
    assert result.evaluated_nodes == 1000


class Observed:
    """A FrameworkObserver that keeps every report."""

    def __init__(self) -> None:
        self.plugins: list[tuple[str, str, Code]] = []
        self.points: list[tuple[str, Code]] = []

    def plugin_done(self, point: str, plugin: str, code: Code, seconds: float) -> None:
        assert seconds >= 0
        self.plugins.append((point, plugin, code))

    def point_done(self, point: str, code: Code, seconds: float) -> None:
        self.points.append((point, code))


def test_every_plugin_call_goes_through_the_one_instrumented_invocation() -> None:
    fw, _, _ = make([Recorder("A", [])])
    observed = fw.observer = Observed()
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert asyncio.run(binding_cycle(fw, result)).is_success()
    assert [(point, code) for point, _, code in observed.plugins] == [
        ("PreFilter", Code.SUCCESS), ("Filter", Code.SUCCESS), ("PreScore", Code.SUCCESS), ("Score", Code.SUCCESS),
        ("Reserve", Code.SUCCESS), ("Permit", Code.SUCCESS), ("PreBind", Code.SUCCESS), ("Bind", Code.SUCCESS),
        ("PostBind", Code.SUCCESS),
    ]
    assert {plugin for _, plugin, _ in observed.plugins} == {"A"}
    assert [point for point, _ in observed.points] == [
        "PreFilter", "Filter", "PreScore", "Score", "Reserve", "Permit", "PreBind", "Bind", "PostBind",
    ]


@pytest.mark.parametrize("point", ["pre_filter", "filter", "pre_score", "score", "reserve", "permit"])
def test_an_exception_at_any_scheduling_point_is_an_error_naming_plugin_and_point(point: str) -> None:
    def boom(*_args: Any) -> Any:
        raise RuntimeError("kaboom")

    log: list[str] = []
    plugin = Recorder("A", log)
    setattr(plugin, point, boom)
    fw, snap, _ = make([plugin])
    observed = fw.observer = Observed()
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    wire_name = {"pre_filter": "PreFilter", "pre_score": "PreScore"}.get(point, point.capitalize())
    assert result.status.code is Code.ERROR and result.status.plugin == "A"
    # kube-scheduler's words for each point (pkg/scheduler/framework/runtime/framework.go)
    where = {"Filter": 'running "A" filter plugin', "Score": 'running Score plugins: plugin "A" failed with'}
    assert result.status.message == where.get(wire_name, f'running {wire_name} plugin "A"') + ": kaboom"
    assert (wire_name, "A", Code.ERROR) in observed.plugins
    assert snap.records == {}  # nothing stays assumed
    if point in ("reserve", "permit"):
        assert log[-1] == "A.Unreserve"


def test_an_error_status_answered_by_a_plugin_names_it() -> None:
    fw, _, _ = make([Recorder("A", [], pre_score=Status.error("metrics backend down"))], points=("preScore",))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert result.status.message == 'running PreScore plugin "A": metrics backend down'
    assert result.status.plugin == "A"


def test_failing_post_bind_and_unreserve_are_logged_and_the_others_still_run(caplog: pytest.LogCaptureFixture) -> None:
    def boom(*_args: Any) -> None:
        raise RuntimeError("kaboom")

    log: list[str] = []
    a, b = Recorder("A", log), Recorder("B", log)
    a.post_bind = boom  # type: ignore[method-assign]
    fw, snap, _ = make([a, b], points=("reserve", "bind", "postBind"))
    result = scheduling_cycle(fw, PodInfo.from_dict(pod("p")))
    assert asyncio.run(binding_cycle(fw, result)).is_success()
    assert log[-1] == "B.PostBind" and not snap.records["default/p"].assumed
    assert "PostBind plugin A failed" in caplog.text
    b.unreserve = boom  # type: ignore[method-assign]
    assumed = scheduling_cycle(fw, PodInfo.from_dict(pod("q")))
    assert assumed.node_name is not None and snap.records["default/q"].assumed
    log.clear()
    rollback(fw, CycleState(), assumed.pod, assumed.node_name)
    assert log == ["A.Unreserve"] and "default/q" not in snap.records
    assert "Unreserve plugin B failed" in caplog.text


class WithExtensions(Recorder):
    """A PreFilter that logs the pods a simulation added to or removed from each node."""

    def add_pods(self, state: CycleState, p: PodInfo, snap: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        self.log += [f"{self.name}.AddPod {o.name}@{snap.node_name(int(r))}" for r, o in zip(rows, pods, strict=True)]
        return self.b.get("add_pod", SUCCESS)

    def remove_pods(self, state: CycleState, p: PodInfo, snap: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        self.log += [f"{self.name}.RemovePod {o.name}@{snap.node_name(int(r))}" for r, o in zip(rows, pods, strict=True)]
        return SUCCESS


def test_pre_filter_extensions_run_on_the_plugins_that_have_them_and_did_not_skip() -> None:
    log: list[str] = []
    fw, snap, _ = make([WithExtensions("A", log), Recorder("B", log), WithExtensions("C", log, pre_filter=Status.skip())],
                       points=("preFilter",))
    state, me, victim = CycleState(), PodInfo.from_dict(pod("me")), PodInfo.from_dict(pod("victim"))
    _, status, _ = fw.run_pre_filter(state, me, snap)
    assert status.is_success() and state.skip_filter_plugins == {"C"}
    log.clear()
    n1, n2 = (np.array([snap.node_by_name(n).index], np.intp) for n in ("n1", "n2"))  # type: ignore[union-attr]
    assert fw.run_pre_filter_extension_remove_pods(state, me, snap, n1, [victim]).is_success()
    assert fw.run_pre_filter_extension_add_pods(state, me, snap, n2, [victim]).is_success()
    assert log == ["A.RemovePod victim@n1", "A.AddPod victim@n2"]
    fw, snap, _ = make([WithExtensions("A", log, add_pod=Status.error("no room"))], points=("preFilter",))
    status = fw.run_pre_filter_extension_add_pods(CycleState(), me, snap, snap.node_indices()[:1], [victim])
    assert status.code is Code.ERROR and status.message == 'running AddPod on PreFilter plugin "A": no room'
