"""The garbage-collector settings of a process holding informer caches (common.kube.reflector)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from common.kube import reflector
from common.kube.reflector import (
    GC_YOUNG_THRESHOLD,
    freeze_cache_objects,
    pause_gc_until_frozen,
    relax_gc_for_caches,
)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.enable()
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


def test_the_collector_paused_for_the_initial_lists_runs_again_at_the_freeze(restored_gc: None) -> None:
    async def scenario() -> None:
        pause_gc_until_frozen(asyncio.get_running_loop())
        assert not gc.isenabled()
        freeze_cache_objects()
        assert gc.isenabled()

    asyncio.run(scenario())


def test_the_collector_runs_again_after_the_pause_limit_without_a_sync(
    restored_gc: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API server that never answers: the reflectors retry (and make garbage cycles) for as long as it takes."""
    monkeypatch.setattr(reflector, "INITIAL_GC_PAUSE_SECONDS", 0.05)

    async def scenario() -> None:
        pause_gc_until_frozen(asyncio.get_running_loop())
        assert not gc.isenabled()
        await asyncio.sleep(0.2)
        assert gc.isenabled()

    asyncio.run(scenario())
