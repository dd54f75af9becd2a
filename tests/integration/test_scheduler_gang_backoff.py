"""A gang that can never fit costs the scheduler next to nothing, with every Coscheduling setting (issue 12).

Room for 10 (5 kwok nodes × 4 cores, pods of 1.5 cores: two per node), three gangs of 4: two are
bound, the third can never be. Before every retry path went through the queue's backoff, with
`implicitMinResources: false` the third gang re-activated itself from Permit and was retried
4,200–5,400 times a second at ~100 % of a core, forever. One scheduler process per setting, all
at once (each has its own schedulerName and its own nodes); each one's CPU time is read from
/proc over the same window after the two gangs are bound.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane
from tests.integration.scheduler_support import (
    PG_LABEL,
    SUITE,
    Api,
    LoadlineScheduler,
    create_pods,
    placements,
    pod,
    running_scheduler,
    scheduler_config,
    unique,
    wait_for,
)
from tests.objects import pod_group

pytestmark = pytest.mark.integration

PG_PATH = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{}/podgroups"
WINDOW_SECONDS = 30.0
# name -> (Coscheduling args, PodGroup spec extras)
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "implicit": ({}, {}),
    "no-implicit": ({"implicitMinResources": False}, {}),
    "no-implicit-backoff": ({"implicitMinResources": False, "podGroupBackoffSeconds": 5}, {}),
    "min-resources": ({"implicitMinResources": False}, {"minResources": {"cpu": "6"}}),
}


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (and its reaped children) from /proc/<pid>/stat."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115 - /proc read
    ticks = sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def pending_attempts_histogram(scheduler: LoadlineScheduler) -> dict[str, float]:
    text = scheduler.metrics()
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r'^loadline_scheduler_pending_pod_scheduling_attempts_bucket\{le="([^"]+)"\} (\S+)$',
                             text, re.MULTILINE)
    }  # fmt: skip


def test_a_gang_that_can_never_fit_costs_about_no_cpu_with_every_coscheduling_setting(
    cluster: ControlPlane, namespace: str, kwok_nodes: Any
) -> None:
    api = Api(cluster)
    with contextlib.ExitStack() as stack:
        schedulers: dict[str, LoadlineScheduler] = {}
        for setting, (args, group_spec) in SETTINGS.items():
            suite = unique(setting)
            kwok_nodes(5, cpu="4", memory="16Gi", labels={SUITE: suite})
            name = f"spin-{setting}"
            profile = {"schedulerName": name,
                       "pluginConfig": [{"name": "Coscheduling", "args": args}]} if args else {"schedulerName": name}
            schedulers[setting] = stack.enter_context(running_scheduler(cluster, scheduler_config(profile)))
            for g in range(3):
                group = f"{setting}-g{g}"
                api.create(PG_PATH.format(namespace), pod_group(group, 4, namespace=namespace, **group_spec))
                create_pods(api, [
                    pod(f"{group}-{i}", namespace, cpu="1500m", memory="1Gi", scheduler=name,
                        labels={PG_LABEL: group}, node_selector={SUITE: suite})
                    for i in range(4)
                ])  # fmt: skip

        def bound(setting: str) -> int:
            return sum(1 for p, n in placements(api, namespace).items() if n and p.startswith(f"{setting}-g"))

        try:
            wait_for("two gangs of four bound under every setting",
                     lambda: all(bound(s) == 8 for s in SETTINGS), timeout=120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: bound {({s: bound(s) for s in SETTINGS})}") from None
        time.sleep(3)  # let the third gang's first attempts and the gangs' Permit rollbacks pass
        pids = {s: sch.component.proc.pid for s, sch in schedulers.items() if sch.component.proc is not None}
        before = {s: cpu_seconds(pid) for s, pid in pids.items()}
        started = time.monotonic()
        time.sleep(WINDOW_SECONDS)
        elapsed = time.monotonic() - started
        used = {s: cpu_seconds(pid) - before[s] for s, pid in pids.items()}

        for setting, scheduler in schedulers.items():
            assert scheduler.component.alive(), f"{setting}: the scheduler exited"
            share = used[setting] / elapsed
            histogram = pending_attempts_histogram(scheduler)
            print(f"{setting}: {used[setting]:.2f} s CPU in {elapsed:.0f} s ({share:.1%}), pending attempts {histogram}")
            assert bound(setting) == 8
            # a spinning gang took 85-100 % of a core; an idle scheduler with watches open takes ~1 %
            assert share < 0.05, f"{setting}: {share:.1%} of a core for a gang that cannot fit"
            # the third gang's pods are queued (one may be waiting in Permit), each after a handful of attempts
            assert 1 <= histogram["+Inf"] <= 4, histogram
            assert histogram["64"] == histogram["+Inf"], f"{setting}: a pod was attempted more than 64 times: {histogram}"
