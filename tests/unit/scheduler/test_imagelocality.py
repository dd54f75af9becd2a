"""ImageLocality against kube-scheduler's table (imagelocality/image_locality_test.go) and its name
normalisation; the cluster-wide image states as kube-scheduler's cache keeps them."""

from __future__ import annotations

from typing import Any

import pytest

from common.api.scheduling import normalized_image_name
from scheduler_plugin.framework.cycle_state import CycleState
from scheduler_plugin.framework.images import MAX_IMAGE_SIZE_BYTES
from scheduler_plugin.framework.podinfo import PodInfo
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.imagelocality import MB, ImageLocality
from tests.objects import node, pod

Obj = dict[str, Any]


def image_node(name: str, *images: tuple[list[str], int]) -> Obj:
    obj = node(name)
    obj["status"]["images"] = [{"names": names, "sizeBytes": size} for names, size in images]
    return obj


def image_pod(*images: str, init: tuple[str, ...] = (), volumes: tuple[str, ...] = ()) -> Obj:
    extra: Obj = {}
    if init:
        extra["initContainers"] = [{"name": f"i{i}", "image": image} for i, image in enumerate(init)]
    if volumes:
        extra["volumes"] = [{"name": f"v{i}", "image": {"reference": ref}} for i, ref in enumerate(volumes)]
    return pod(containers=[{"name": f"c{i}", "image": image} for i, image in enumerate(images)], **extra)


N403002000 = [(["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
              (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB), (["gcr.io/2000:latest"], 2000 * MB)]
N25010 = [(["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB)]
N60040900 = [(["gcr.io/600:latest"], 600 * MB), (["gcr.io/40:latest"], 40 * MB), (["gcr.io/900:latest"], 900 * MB)]
N300600900 = [(["gcr.io/300:latest"], 300 * MB), (["gcr.io/600:latest"], 600 * MB), (["gcr.io/900:latest"], 900 * MB)]
N400030 = [(["gcr.io/4000:latest"], 4000 * MB), (["gcr.io/30:latest"], 30 * MB)]
N203040 = [(["gcr.io/20:latest"], 20 * MB), (["gcr.io/30:latest"], 30 * MB), (["gcr.io/40:latest"], 40 * MB)]


def scores(pod: Obj, *nodes: list[tuple[list[str], int]]) -> list[int]:
    snap = Snapshot.from_objects([image_node(f"node{i + 1}", *images) for i, images in enumerate(nodes)])
    plugin = ImageLocality()
    info = PodInfo.from_dict(pod)
    rows = snap.node_indices()
    if plugin.pre_score(CycleState(), info, snap, rows).is_skip():
        return [0] * rows.size
    return [int(s) for s in plugin.score(CycleState(), info, snap, rows)]


@pytest.mark.parametrize(("pod", "nodes", "expected"), [
    (image_pod("gcr.io/40", "gcr.io/250"), [N403002000, N25010], [0, 5]),  # prefer the larger image
    (image_pod("gcr.io/40", "gcr.io/300"), [N403002000, N25010], [7, 0]),  # two images on one node
    (image_pod("gcr.io/10", "gcr.io/4000"), [N400030, N25010], [100, 0]),  # over the max threshold
    (image_pod("gcr.io/10", "gcr.io/4000"), [N400030, N25010, []], [66, 0, 0]),  # a node without images
    (image_pod("gcr.io/300", "gcr.io/600", "gcr.io/900"), [N60040900, N300600900, []], [32, 36, 0]),
    (image_pod("gcr.io/30", "gcr.io/40"), [N203040, N400030], [1, 0]),  # multiple small images
    (image_pod("gcr.io/30", volumes=("gcr.io/300",)), [N300600900, N400030], [12, 0]),  # image volume
    (image_pod("gcr.io/30", init=("gcr.io/300",)), [N403002000, N203040], [6, 0]),  # init container
])
def test_kube_scheduler_table(pod: Obj, nodes: list[list[tuple[list[str], int]]], expected: list[int]) -> None:
    assert scores(pod, *nodes) == expected


@pytest.mark.parametrize(("name", "normalised"), [
    ("root", "root:latest"),
    ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root:tag", "root:tag"),
    ("root@sha256:" + "a" * 64, "root@sha256:" + "a" * 64),
    ("nginx", "nginx:latest"),  # no docker.io/library/ prefix is added, as in kube-scheduler
])
def test_image_names_are_normalised_as_kube_scheduler_does(name: str, normalised: str) -> None:
    assert normalized_image_name(name) == normalised


def test_image_states_follow_kube_schedulers_cache() -> None:
    snap = Snapshot.from_objects([image_node("a", (["x:1"], 100)), image_node("b", (["x:1"], 999))])
    state = snap.images.get("x:1")
    assert state is not None and state.size == 100 and len(state.rows) == 2  # the first report's size
    snap.upsert_node(image_node("a", (["y:1"], 5)))
    state = snap.images.get("x:1")
    assert state is not None and state.size == 100 and len(state.rows) == 1  # b still has it: size kept
    snap.upsert_node(image_node("b", (["x:1"], 7)))
    state = snap.images.get("x:1")
    assert state is not None and state.size == 7  # its only holder re-reports it: started afresh
    snap.remove_node("b")
    assert snap.images.get("x:1") is None and snap.images.get("y:1") is not None


def test_sizes_are_clamped_and_many_containers_stay_in_range() -> None:
    huge = MAX_IMAGE_SIZE_BYTES * 4
    pod = image_pod(*(["big"] * 5000))
    got = scores(pod, [(["big:latest"], huge)], [(["big:latest"], -5)])
    assert got == [100, 100]  # both nodes have it (sizes clamped to 0..1 PiB, the first report's size counts)
