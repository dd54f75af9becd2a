"""ImageLocality: prefer nodes that already have the pod's images (kube-scheduler's imagelocality).

For each image of the pod (init containers, containers, image volumes; names normalised with
":latest" when untagged) that a node reports in `status.images`, the node earns the image's
size scaled by the share of all nodes that have it (so an image present everywhere does not pile
pods onto the node that happens to be first). The sum is clamped to [23 MiB, 1000 MiB × number of
containers] and mapped onto 0..100. Vectorised per distinct image: one addition over
the rows holding it (`snapshot.images`, kept current as nodes report).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
from pydantic import BaseModel

from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.interfaces import MAX_NODE_SCORE, FrameworkHandle
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import IndexArray, IntArray, Snapshot
from scheduler_plugin.framework.status import SUCCESS, Status

NAME = "ImageLocality"
MB = 1024 * 1024
# The range of image sizes the score spreads over (90% of Docker Hub's compressed images, per kube-scheduler).
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def image_priority(sums: IntArray, num_containers: int) -> IntArray:
    """kube-scheduler's calculatePriority: the summed scores clamped to [min, 1000 MiB × containers], onto 0..100."""
    top = MAX_CONTAINER_THRESHOLD * num_containers
    clamped = np.clip(sums, MIN_THRESHOLD, top)
    out: IntArray = MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (top - MIN_THRESHOLD)
    return out


def scaled_image_score(size: int, num_nodes: int, total_nodes: int) -> int:
    """kube-scheduler's scaledImageScore: int64(float64(size) × (nodes having it / all nodes))."""
    return int(float(size) * (num_nodes / total_nodes))


class ImageLocality:
    name = NAME

    @classmethod
    def new(cls, _args: BaseModel | None, _handle: FrameworkHandle) -> ImageLocality:
        return cls()

    def events_to_register(self) -> frozenset[str]:
        return frozenset()  # a Score plugin rejects no pod

    def pre_score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> Status:
        # A pod whose images no node has scores 0 everywhere: skip the per-node work.
        images = snapshot.images
        return SUCCESS if any(images.get(name) is not None for name in pod.images) else Status.skip()

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, candidates: IndexArray) -> IntArray:
        top = MAX_CONTAINER_THRESHOLD * max(pod.num_containers, 1)
        total_nodes = max(snapshot.num_nodes, 1)
        # Each distinct image adds the same amount to every row holding it (kube-scheduler adds it once per
        # container using it); an amount beyond the top threshold is clamped anyway, so it is capped there.
        rows: list[IndexArray] = []
        gains: list[int] = []
        for name, count in Counter(pod.images).items():
            image = snapshot.images.get(name)
            if image is not None:
                rows.append(image.row_array())
                gains.append(min(scaled_image_score(image.size, len(image.rows), total_nodes) * count, top))
        sums = np.zeros(snapshot.num_slots, np.int64)
        if rows:
            # One scatter-add over all (row, image) pairs; at most len(gains) × top per row, inside int64 for
            # any pod the API server can store (it would take ~90,000 containers to get near 2^63).
            lengths = np.fromiter((r.size for r in rows), np.intp, len(rows))
            np.add.at(sums, np.concatenate(rows), np.repeat(np.asarray(gains, np.int64), lengths))
        return image_priority(sums.take(candidates), max(pod.num_containers, 1))
