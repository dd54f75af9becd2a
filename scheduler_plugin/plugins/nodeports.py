"""NodePorts: a pod's host ports must be free on the node (kube-scheduler's nodeports plugin).

The pod's ports come from its digest (`PodInfo.host_ports`: containers and sidecar init
containers, protocol defaulted to TCP, hostIP to 0.0.0.0); the ports in use per node from the
snapshot's `HostPortTable`, kept as pods are accounted, so a Filter looks up only the rows that
use the wanted ports. Simulated pods (nominated pods, preemption's victims) go into a delta
table in the cycle state, which the Filter adds; without host ports the pod skips the Filter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.events import ASSIGNED_POD_DELETE, NODE_ADD
from scheduler_plugin.framework.filterresult import ALL_PASS, FilterResult
from scheduler_plugin.framework.hostports import HostPortTable, conflicting_rows
from scheduler_plugin.framework.interfaces import FrameworkHandle, PreFilterResult
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
SIMULATED = "NodePorts/simulated"  # cycle state: HostPortTable of ports added/released by a simulation


class NodePorts:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> NodePorts:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        # A pod holding ports left, or a node appeared (ports are immutable, so pod updates never help).
        return frozenset({ASSIGNED_POD_DELETE, NODE_ADD})

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> tuple[PreFilterResult | None, Status]:
        return None, SUCCESS if pod.host_ports else Status.skip()

    def add_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                 pods: Sequence[PodInfo]) -> Status:
        return _simulate(state, rows, pods, 1)

    def remove_pods(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: IndexArray,
                    pods: Sequence[PodInfo]) -> Status:
        return _simulate(state, rows, pods, -1)

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> FilterResult:
        if not pod.host_ports:
            return ALL_PASS
        taken = conflicting_rows(pod.host_ports, snapshot.host_ports, state.get(SIMULATED, HostPortTable))
        if not taken:
            return ALL_PASS
        return FilterResult.rejecting(REASON, np.isin(candidates, np.fromiter(taken, np.intp, len(taken))))


def _simulate(state: CycleState, rows: IndexArray, pods: Sequence[PodInfo], sign: int) -> Status:
    with_ports = [(row, p) for row, p in zip(rows.tolist(), pods, strict=True) if p.host_ports]
    if not with_ports:
        return SUCCESS
    delta = state.get(SIMULATED, HostPortTable)
    if delta is None:
        delta = HostPortTable()
        state.write(SIMULATED, delta)
    for row, p in with_ports:
        delta.add(row, p.host_ports, sign)
    return SUCCESS
