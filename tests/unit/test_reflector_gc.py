"""The garbage-collector settings of a process holding informer caches (common.kube.reflector)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from common.kube.reflector import GC_YOUNG_THRESHOLD, freeze_cache_objects, relax_gc_for_caches


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def test_relaxing_raises_only_the_young_threshold_and_never_lowers_it(restored_gc: None) -> None:
    gc.set_threshold(700, 10, 10)
    relax_gc_for_caches()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, 10, 10)
    gc.set_threshold(GC_YOUNG_THRESHOLD * 2, 5, 7)
    relax_gc_for_caches()
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD * 2, 5, 7)


class Entry:
    """A cache entry that can be weakly referenced (a dict cannot)."""

    def __init__(self, obj: dict[str, object]) -> None:
        self.obj = obj


def test_frozen_cache_objects_are_not_scanned_but_still_freed_when_replaced(restored_gc: None) -> None:
    cache = {f"pod-{i}": Entry({"metadata": {"name": f"pod-{i}"}, "spec": {"containers": [{}]}}) for i in range(1000)}
    watched = weakref.ref(cache["pod-0"])
    freeze_cache_objects()
    assert gc.get_freeze_count() >= 1000
    assert not any(obj is cache for obj in gc.get_objects())  # the permanent generation is not scanned
    cache["pod-0"] = Entry({})  # a watch update replaces the entry: refcounting frees the frozen one
    assert watched() is None
