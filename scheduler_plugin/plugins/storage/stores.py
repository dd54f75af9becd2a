"""The storage objects the volume plugins read, kept with the snapshot (one store per resource).

PersistentVolumes and PersistentVolumeClaims sit behind an assume cache, as in kube-scheduler
(volumebinding/passive_assume_cache.go): VolumeBinding's Reserve assumes the PV it binds (claimRef
set) and the claim it provisions (selected-node set) before the API server has them, so the next
pod's cycle sees them taken. An assumed version stands while the watched object still has the
resourceVersion it was derived from; any newer version of the object ends the assumption.

An object that cannot be read is left out and named by `unreadable(...)`, so a plugin can say why a
pod that uses it is refused instead of calling it missing; a PV with an unreadable node affinity term
is kept (the term matches no node) and reported once per version by the informer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from common.api.malformed import MalformedObjectError
from common.api.storage import (
    CSIDriver,
    CSINode,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageCapacity,
    StorageClass,
    VolumeAttachment,
    parse_claim,
    parse_csi_driver,
    parse_csi_node,
    parse_persistent_volume,
    parse_storage_capacity,
    parse_storage_class,
    parse_volume_attachment,
)
from common.kube.reflector import object_key
from scheduler_plugin.framework.snapshot import Snapshot

T = TypeVar("T")


class OutOfSyncError(Exception):
    """An object to assume is not derived from the version the store holds."""


class _Store(Generic[T]):
    """Digests by "namespace/name" (or name), the unreadable objects' errors, a change counter."""

    kind = ""

    def __init__(self, parse: Callable[[Mapping[str, Any]], T]) -> None:
        self._parse = parse
        self._items: dict[str, T] = {}
        self._unreadable: dict[str, str] = {}
        self.version = 0  # bumped on every change: caches derived from the store key on it

    def __len__(self) -> int:
        return len(self._items)

    def upsert(self, obj: Mapping[str, Any]) -> None:
        key = object_key(obj)
        self.version += 1
        try:
            item = self._parse(obj)
        except MalformedObjectError as exc:
            self._forget(key)
            self._unreadable[key] = str(exc)
            raise
        self._unreadable.pop(key, None)
        self._forget(key)
        self._items[key] = item
        self._added(key, item)

    def remove(self, obj: Mapping[str, Any]) -> None:
        key = object_key(obj)
        self.version += 1
        self._unreadable.pop(key, None)
        self._forget(key)

    def _forget(self, key: str) -> None:
        item = self._items.pop(key, None)
        if item is not None:
            self._removed(key, item)

    def _added(self, key: str, item: T) -> None:
        """Index hook."""

    def _removed(self, key: str, item: T) -> None:
        """Index hook."""

    def get(self, key: str) -> T | None:
        return self._items.get(key)

    def unreadable(self, key: str) -> str | None:
        """Why the object under `key` could not be read (None: it is fine, or absent)."""
        return self._unreadable.get(key)

    def values(self) -> Iterable[T]:
        return self._items.values()


class _AssumeStore(_Store[T]):
    """A store with kube-scheduler's passive assume cache on top."""

    def __init__(self, parse: Callable[[Mapping[str, Any]], T], version_of: Callable[[T], int]) -> None:
        super().__init__(parse)
        self._version_of = version_of
        self._assumed: dict[str, T] = {}

    def _removed(self, key: str, item: T) -> None:
        assumed = self._assumed.get(key)
        if assumed is not None and self._version_of(assumed) != self._version_of(item):
            del self._assumed[key]  # a newer version arrived (or none): the assumption is over

    def _added(self, key: str, item: T) -> None:
        assumed = self._assumed.get(key)
        if assumed is not None and self._version_of(assumed) != self._version_of(item):
            del self._assumed[key]

    def remove(self, obj: Mapping[str, Any]) -> None:
        self._assumed.pop(object_key(obj), None)
        super().remove(obj)

    def get(self, key: str) -> T | None:
        """The assumed version while it stands, else the watched one."""
        item = self._items.get(key)
        assumed = self._assumed.get(key)
        if item is not None and assumed is not None and self._version_of(assumed) == self._version_of(item):
            return assumed
        return item

    def get_api(self, key: str) -> T | None:
        """The object as the API server last reported it."""
        return self._items.get(key)

    def _assume(self, key: str, item: T) -> None:
        stored = self._items.get(key)
        if stored is None:
            raise OutOfSyncError(f"{self.kind} {key!r} not found")
        if self._version_of(stored) != self._version_of(item):
            raise OutOfSyncError(f"{key!r} is out of sync (stored: {self._version_of(stored)}, "
                                 f"assume: {self._version_of(item)})")  # fmt: skip
        self._assumed[key] = item
        self.version += 1

    def _restore(self, key: str, item: T) -> None:
        assumed = self._assumed.get(key)
        if assumed is not None and self._version_of(assumed) == self._version_of(item):
            del self._assumed[key]
            self.version += 1

    def assumed_count(self) -> int:
        return len(self._assumed)


class PersistentVolumes(_AssumeStore[PersistentVolume]):
    kind = "PersistentVolume"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_persistent_volume, lambda pv: pv.resource_version)
        self._by_class: dict[str, set[str]] = {}
        self._members_version = 0  # bumped when a PV is added, changed or removed (not when assumed)
        self._sorted: dict[str, tuple[int, list[str]]] = {}

    def upsert(self, obj: Mapping[str, Any]) -> None:
        super().upsert(obj)
        pv = self._items[object_key(obj)]
        if pv.node_affinity is not None and pv.node_affinity.problem is not None:
            # Kept (that term matches no node, as in kube-scheduler); reported so the log says which PV.
            raise MalformedObjectError(pv.node_affinity.problem, kind=self.kind, name=pv.name)

    def _added(self, key: str, item: PersistentVolume) -> None:
        super()._added(key, item)
        self._members_version += 1
        self._by_class.setdefault(item.storage_class, set()).add(key)

    def _removed(self, key: str, item: PersistentVolume) -> None:
        super()._removed(key, item)
        self._members_version += 1
        names = self._by_class.get(item.storage_class)
        if names is not None:
            names.discard(key)
            if not names:
                del self._by_class[item.storage_class]

    def in_class(self, storage_class: str) -> tuple[PersistentVolume, ...]:
        """The PVs of a class as VolumeBinding sees them (assumed versions included), smallest first."""
        cached = self._sorted.get(storage_class)
        if cached is None or cached[0] != self._members_version:
            # (capacity and name do not change when a PV is assumed: the order holds until a PV changes)
            members = [self._items[name] for name in self._by_class.get(storage_class, ())]
            members.sort(key=lambda pv: (pv.capacity.nanos, pv.name))
            cached = self._sorted[storage_class] = (self._members_version, [pv.name for pv in members])
        return tuple(pv for name in cached[1] if (pv := self.get(name)) is not None)

    def assume(self, pv: PersistentVolume) -> None:
        self._assume(pv.name, pv)

    def restore(self, pv: PersistentVolume) -> None:
        self._restore(pv.name, pv)


class PersistentVolumeClaims(_AssumeStore[PersistentVolumeClaim]):
    kind = "PersistentVolumeClaim"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_claim, lambda claim: claim.resource_version)

    def claim(self, namespace: str, name: str) -> PersistentVolumeClaim | None:
        return self.get(f"{namespace}/{name}")

    def assume(self, claim: PersistentVolumeClaim) -> None:
        self._assume(claim.key, claim)

    def restore(self, claim: PersistentVolumeClaim) -> None:
        self._restore(claim.key, claim)


class StorageClasses(_Store[StorageClass]):
    kind = "StorageClass"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_storage_class)


class CSINodes(_Store[CSINode]):
    kind = "CSINode"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_csi_node)


class CSIDrivers(_Store[CSIDriver]):
    kind = "CSIDriver"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_csi_driver)


class VolumeAttachments(_Store[VolumeAttachment]):
    kind = "VolumeAttachment"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_volume_attachment)
        self._by_node: dict[str, set[str]] = {}

    def _added(self, key: str, item: VolumeAttachment) -> None:
        self._by_node.setdefault(item.node, set()).add(key)

    def _removed(self, key: str, item: VolumeAttachment) -> None:
        names = self._by_node.get(item.node)
        if names is not None:
            names.discard(key)
            if not names:
                del self._by_node[item.node]

    def on_node(self, node: str) -> list[VolumeAttachment]:
        return [va for key in self._by_node.get(node, ()) if (va := self._items.get(key)) is not None]


class StorageCapacities(_Store[StorageCapacity]):
    kind = "CSIStorageCapacity"

    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__(parse_storage_capacity)
