"""An in-memory stand-in for KubeHTTP: records every call, answers from a dict of objects by path."""

from __future__ import annotations

import copy
import itertools
from typing import Any, cast

from common.kube.http import KubeError, KubeHTTP


class FakeHTTP:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, Any]] = []
        self.fail: dict[tuple[str, str], KubeError] = {}  # (method, path) -> error raised once
        self._rv = itertools.count(100)

    def as_kube(self) -> KubeHTTP:
        return cast(KubeHTTP, self)

    def _maybe_fail(self, method: str, path: str) -> None:
        error = self.fail.pop((method, path), None)
        if error is not None:
            raise error

    def _stamp(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._rv))
        return obj

    def writes(self, method: str | None = None) -> list[tuple[str, str, Any]]:
        return [c for c in self.calls if c[0] != "GET" and (method is None or c[0] == method)]

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append(("GET", path, params))
        self._maybe_fail("GET", path)
        if path not in self.objects:
            raise KubeError(404, "Not Found")
        return copy.deepcopy(self.objects[path])

    async def create(self, path: str, body: Any) -> dict[str, Any]:
        self.calls.append(("POST", path, copy.deepcopy(body)))
        self._maybe_fail("POST", path)
        name = (body.get("metadata") or {}).get("name")
        stored = self._stamp(copy.deepcopy(body))
        if name and "/events" not in path and not path.endswith("/eviction"):
            key = f"{path}/{name}"
            if key in self.objects:
                raise KubeError(409, "AlreadyExists")
            self.objects[key] = stored
        return copy.deepcopy(stored)

    async def replace(self, path: str, body: Any) -> dict[str, Any]:
        self.calls.append(("PUT", path, copy.deepcopy(body)))
        self._maybe_fail("PUT", path)
        stored = self._stamp(copy.deepcopy(body))
        self.objects[path] = stored
        return copy.deepcopy(stored)

    async def merge_patch(self, path: str, patch: Any) -> dict[str, Any]:
        self.calls.append(("PATCH", path, copy.deepcopy(patch)))
        self._maybe_fail("PATCH", path)
        target = self.objects.setdefault(path.removesuffix("/status"), {"metadata": {}})
        _merge(target, patch)
        return copy.deepcopy(self._stamp(target))

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        self.calls.append(("DELETE", path, body))
        self._maybe_fail("DELETE", path)
        if path not in self.objects:
            raise KubeError(404, "Not Found")
        return self.objects.pop(path)

    async def close(self) -> None:
        pass


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    """RFC 7386 JSON merge patch."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
