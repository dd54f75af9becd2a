"""A Filter's answer over its candidates: the feasible mask and, per reason, the nodes rejected for it
(read by the framework, the plugins and the Diagnosis of a pod that fits nowhere)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from scheduler_plugin.framework.snapshot import BoolArray
from scheduler_plugin.framework.status import SUCCESS, Code, Status


@dataclass(frozen=True, slots=True)
class Rejection:
    """The candidates (mask over the Filter's input) rejected for one reason."""

    reason: str
    mask: BoolArray
    code: Code = Code.UNSCHEDULABLE


@dataclass(slots=True)
class FilterResult:
    """Answer of a Filter over its candidates.

    `feasible` is None when every candidate passes. `rejections` name why the others failed
    (a node may appear under several reasons of the same plugin, like kube-scheduler's
    multi-reason Status). A non-success, non-rejection `status` (Error) aborts the cycle.
    """

    feasible: BoolArray | None = None
    rejections: tuple[Rejection, ...] = ()
    status: Status = SUCCESS

    @classmethod
    def from_rejections(cls, size: int, rejections: Sequence[Rejection]) -> FilterResult:
        kept = tuple(r for r in rejections if r.mask.any())
        if not kept:
            return ALL_PASS
        rejected = np.zeros(size, np.bool_)
        for r in kept:
            rejected |= r.mask
        return cls(~rejected, kept)

    @classmethod
    def rejecting(cls, reason: str, mask: BoolArray, code: Code = Code.UNSCHEDULABLE) -> FilterResult:
        """Candidates where `mask` is True fail for `reason`."""
        return cls.from_rejections(mask.size, [Rejection(reason, mask, code)])

    @classmethod
    def reject_all(cls, size: int, reason: str, code: Code = Code.UNSCHEDULABLE) -> FilterResult:
        return cls.from_rejections(size, [Rejection(reason, np.ones(size, np.bool_), code)])

    @classmethod
    def error(cls, message: str) -> FilterResult:
        return cls(status=Status.error(message))


ALL_PASS = FilterResult()
