"""Plugin-owned stores of watched objects, kept with the snapshot.

A plugin that reads a resource besides nodes and pods declares it (`interfaces.WatchedResource`)
together with the store that digests its objects, as Koordinator's LoadAware owns its
NodeMetric lister. The informers (the scheduler's and the extender's) hand every event to that
store; the snapshot only holds the stores, one per store type, so it knows no object kind of
a plugin and a plugin added out of tree needs no edit elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class ObjectStore(Protocol):
    """The digested objects of one watched resource."""

    def upsert(self, obj: Mapping[str, Any]) -> None:
        """Add or replace an object; raises MalformedObjectError for one that cannot be used."""
        ...

    def remove(self, obj: Mapping[str, Any]) -> None: ...

    def __len__(self) -> int: ...
