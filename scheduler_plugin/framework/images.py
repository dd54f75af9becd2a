"""Container images on the nodes (kube-scheduler's cache.imageStates), for ImageLocality.

Per image name (as the kubelet reports it in `status.images[].names`, not normalised): its size
and the node rows that have it. As in kube-scheduler's cache, the size is that of the first node
that reported the name and is kept while any node still has it; a name no node has any more is
dropped, and a later report starts it afresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.api.malformed import MalformedObjectError

IndexArray = NDArray[np.intp]

# No container image comes near this (1 PiB); clamping keeps every sum ImageLocality forms far inside int64.
MAX_IMAGE_SIZE_BYTES = 1 << 50


class ImageState:
    __slots__ = ("_row_array", "rows", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: set[int] = set()
        self._row_array: IndexArray | None = None

    def row_array(self) -> IndexArray:
        """The rows as a sorted array (cached until the rows change)."""
        if self._row_array is None:
            self._row_array = np.fromiter(sorted(self.rows), np.intp, len(self.rows))
        return self._row_array

    def changed(self) -> None:
        self._row_array = None


class ImageTable:
    def __init__(self) -> None:
        self.states: dict[str, ImageState] = {}
        self._of_row: dict[int, dict[str, int]] = {}  # row -> the names it reports and the size it reports

    def get(self, name: str) -> ImageState | None:
        return self.states.get(name)

    def images_of(self, row: int) -> Mapping[str, int]:
        return self._of_row.get(row, {})

    def set_row(self, row: int, images: Mapping[str, int]) -> None:
        """The images a node row reports now (empty: the node is gone). Same result as kube-scheduler's
        removeNodeImageStates(old) then addNodeImageStates(new)."""
        old = self._of_row.get(row, {})
        for name in old.keys() - images.keys():
            state = self.states[name]
            state.rows.discard(row)
            state.changed()
            if not state.rows:
                del self.states[name]
        for name, size in images.items():
            found = self.states.get(name)
            if found is None:
                state = self.states[name] = ImageState(size)
            else:
                state = found
                if name in old and state.rows == {row}:
                    state.size = size  # the only holder re-reports it: its entry starts afresh
            if row not in state.rows:
                state.rows.add(row)
                state.changed()
        if images:
            self._of_row[row] = dict(images)
        else:
            self._of_row.pop(row, None)


def parse_node_images(value: Any, field: str = "status.images") -> dict[str, int]:
    """name -> size of every name in a node's `status.images` (a name listed twice keeps its first size)."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise MalformedObjectError(f"{field}: expected a list")
    out: dict[str, int] = {}
    for i, image in enumerate(value):
        if not isinstance(image, Mapping):
            raise MalformedObjectError(f"{field}[{i}]: expected an object")
        size = image.get("sizeBytes") or 0
        if not isinstance(size, int) or isinstance(size, bool):
            raise MalformedObjectError(f"{field}[{i}].sizeBytes: expected an integer")
        size = min(max(size, 0), MAX_IMAGE_SIZE_BYTES)
        names = image.get("names") or []
        if not isinstance(names, list):
            raise MalformedObjectError(f"{field}[{i}].names: expected a list")
        for name in names:
            if isinstance(name, str):
                out.setdefault(name, size)
    return out
