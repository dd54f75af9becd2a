"""The extender's preempt verb: kube-scheduler's candidates are kept only where our filters, with that
candidate's victims removed, accept the pod; answers always in the meta (UID) form."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler_plugin.extender.engine import ExtenderEngine
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.wire import BadRequest, parse_preemption_args, preemption_result
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod
from tests.unit.scheduler.builders import pod_metric

Obj = dict[str, Any]


def engine() -> ExtenderEngine:
    """hot measures 3600m (90 %) and its victim reports 400m of it; cool measures 1000m, its victim 800m."""
    pods = [pod("v-hot", "2", "1Gi", node_name="hot", priority=5000, scheduled_at=T0 - 1000),
            pod("v-cool", "2", "1Gi", node_name="cool", priority=5000, scheduled_at=T0 - 1000)]
    metrics = [node_metric("hot", cpu="3600m", pods=[pod_metric("v-hot", "400m")]),
               node_metric("cool", cpu="1000m", pods=[pod_metric("v-cool", "800m")])]
    snap = Snapshot.from_objects(nodes=[node("hot"), node("cool")], pods=pods, stores={NodeLoads: metrics})
    frameworks = extender_frameworks(None, snapshot=snap, clock=FakeClock(T0 + 10))
    return ExtenderEngine(frameworks, snap, default_profile=next(iter(frameworks)))


def meta_request(victims: dict[str, list[str]]) -> bytes:
    body = {"Pod": pod("prod", "2", "1Gi", priority=9000), "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {n: {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": 0}
                                      for n, uids in victims.items()}}
    return json.dumps(body).encode()


def test_only_candidates_our_filters_accept_are_kept() -> None:
    # hot without its victim: 3600 − 400 + 1700 (the prod pod's estimate) = 4900m > 65 %: dropped.
    # cool without its victim: 1000 − 800 + 1700 = 1900m = 47.5 %: kept, victims unchanged.
    args = parse_preemption_args(meta_request({"hot": ["uid-default-v-hot"], "cool": ["uid-default-v-cool"]}))
    kept = engine().preempt(args)
    assert preemption_result(kept) == {
        "NodeNameToMetaVictims": {"cool": {"Pods": [{"UID": "uid-default-v-cool"}], "NumPDBViolations": 0}}
    }


def test_unknown_victims_drop_the_candidate_and_full_pods_are_read() -> None:
    assert engine().preempt(parse_preemption_args(meta_request({"cool": ["no-such-uid"]}))) == {}
    full = {"Pod": pod("prod", "2", "1Gi", priority=9000), "NodeNameToMetaVictims": None,
            "NodeNameToVictims": {"cool": {"Pods": [pod("v-cool", "2", "1Gi", node_name="cool", priority=5000)],
                                           "NumPDBViolations": 1}}}
    kept = engine().preempt(parse_preemption_args(json.dumps(full)))
    assert preemption_result(kept)["NodeNameToMetaVictims"]["cool"]["NumPDBViolations"] == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"NodeNameToMetaVictims": {}}, "Pod"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}, r"NodeNameToMetaVictims\.n\.Pods\[0\]: UID"),
    ({"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [], "NumPDBViolations": -1}}}, "NumPDBViolations"),
])
def test_bad_preemption_args_name_the_field(body: Obj, field: str) -> None:
    with pytest.raises(BadRequest, match=field):
        parse_preemption_args(json.dumps(body))
