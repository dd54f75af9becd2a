"""Raw JSON access to the API server over aiohttp.

The typed client deserialises every object into generated models; at thousands of
objects per watch that dominates CPU, so every call goes through `KubeHTTP` and gets
plain dicts. Where the server is and how to authenticate (TLS, tokens, in-cluster token
rotation) is a `ClusterAccess` from `common.kube.kubeconfig`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from common.kube.kubeconfig import ClusterAccess, load_configuration
from common.ratelimit import TokenBucket

JSON = dict[str, Any]
POOL_CONNECTIONS = 64  # connections one KubeHTTP keeps to the API server: requests beyond wait for one, FIFO


class KubeError(Exception):
    """A non-2xx answer from the API server (or no answer at all: status 0)."""

    def __init__(self, status: int, reason: str, body: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = dict(body or {})
        super().__init__(f"{status} {reason}: {self.message}")

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.reason)

    @property
    def is_conflict(self) -> bool:
        return self.status == 409

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_gone(self) -> bool:
        return self.status == 410


class KubeHTTP:
    """One aiohttp session to one API server; JSON in, JSON (dicts) out."""

    def __init__(
        self, access: ClusterAccess, *, user_agent: str = "loadline", limiter: TokenBucket | None = None
    ) -> None:
        """`limiter`: client-side rate limit of every request and watch start (client-go's QPS/Burst)."""
        self.access = access
        self.server = access.host.rstrip("/")
        self.user_agent = user_agent
        self.limiter = limiter
        self.throttled_seconds = 0.0  # waited for the limiter in all, for self-metrics
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def connect(
        cls, kubeconfig: str | Path | None = None, *, user_agent: str = "loadline", limiter: TokenBucket | None = None
    ) -> KubeHTTP:
        return cls(await load_configuration(kubeconfig), user_agent=user_agent, limiter=limiter)

    async def _throttle(self) -> None:
        if self.limiter is not None:
            self.throttled_seconds += await self.limiter.acquire()

    def _session_or_new(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # (no context: aiohttp verifies https against the system CAs; plain http never uses it)
            tls = self.access.ssl_context if self.access.ssl_context is not None else True
            connector = aiohttp.TCPConnector(ssl=tls, limit=POOL_CONNECTIONS)
            # The API server sets no cookies: the dummy jar skips filtering them on every request.
            self._session = aiohttp.ClientSession(
                connector=connector, read_bufsize=2**21, cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        token = await self.access.authorization()
        if token:
            headers["Authorization"] = token
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout_seconds: float = 30,
    ) -> JSON:
        await self._throttle()
        session = self._session_or_new()
        data = None if body is None else orjson.dumps(body)
        headers = await self._headers(content_type if data is not None else None)
        try:
            async with session.request(
                method, self.server + path, params=params, data=data, headers=headers, timeout=_timeout(timeout_seconds)
            ) as response:
                payload = _json_or_message(await response.read())
                if response.status >= 300:
                    raise KubeError(response.status, response.reason or "", payload)
                return payload
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeError(0, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from exc

    async def get(self, path: str, **params: str | int) -> JSON:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, body: Any) -> JSON:
        return await self.request("POST", path, body=body)

    async def replace(self, path: str, body: Any) -> JSON:
        return await self.request("PUT", path, body=body)

    async def merge_patch(self, path: str, patch: Any) -> JSON:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")

    async def strategic_patch(self, path: str, patch: Any) -> JSON:
        return await self.request("PATCH", path, body=patch, content_type="application/strategic-merge-patch+json")

    async def delete(self, path: str, body: Any = None) -> JSON:
        return await self.request("DELETE", path, body=body)

    async def watch_lines(
        self, path: str, params: Mapping[str, str | int], read_timeout_seconds: float
    ) -> AsyncIterator[JSON]:
        """Yield decoded watch events until the server closes the stream."""
        await self._throttle()
        session = self._session_or_new()
        headers = await self._headers(None)
        try:
            async with session.get(
                self.server + path,
                params={**params, "watch": "true"},
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=read_timeout_seconds),
            ) as response:
                if response.status >= 300:
                    raise KubeError(response.status, response.reason or "", _json_or_message(await response.read()))
                async for line in response.content:
                    if line.strip():
                        yield decode_json(line)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise KubeError(0, f"{type(exc).__name__}: {exc}") from exc

    def sibling(self, *, user_agent: str, limiter: TokenBucket | None = None) -> KubeHTTP:
        """Another client to the same API server with its own connections (and no rate limit unless given):
        for calls that must not queue behind the bulk of this one's (client-go's separate leader-election
        and event clients)."""
        return KubeHTTP(self.access, user_agent=user_agent, limiter=limiter)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@functools.cache
def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    """`seconds` for the API server to answer once the request is on a connection, not counting the wait for a
    free connection of the pool: a scheduler with thousands of bindings and events in flight queues them there,
    and a total timeout expired them in the queue (each then retried, and re-sent events answered 409)."""
    return aiohttp.ClientTimeout(total=None, connect=None, sock_connect=10, sock_read=seconds)


# Subtrees nested deeper than this are cut from a document that orjson (1,024 levels) or `json` (Python's
# recursion limit, ~1,000 frames with the caller's) refuses: the API server stores preserve-unknown-fields parts
# (a NodeMetric's podsMetric[].extensions) up to 10,000 levels, the deepest built-in Kubernetes type nests < 30.
MAX_JSON_DEPTH = 512
_STRUCTURE = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_CUT = b'"\\u0000loadline:too-deep"'
_CUT_VALUE = "\0loadline:too-deep"

JSONPath = tuple[str | int, ...]


class PrunedJSON(dict[str, Any]):
    """A decoded document from which subtrees deeper than `MAX_JSON_DEPTH` were cut (each is now None);
    `pruned` holds where, as key/index paths from the root. The object holding one is malformed."""

    pruned: list[JSONPath]


def decode_json(data: bytes) -> Any:
    """orjson: a few times faster than `json` on API objects, and decoding watch events and answers was
    the largest single cost in the scheduler's profile. What orjson refuses but `json` reads (a lone
    surrogate escape) goes to `json`. Integers are exact over the whole 64-bit range; the API server
    never sends larger ones (Go decodes those in unstructured objects as floats). A document nested
    too deep for either comes back as a `PrunedJSON`."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            return json.loads(data)
        except RecursionError:
            return _decode_pruned(data)


def _decode_pruned(data: bytes) -> Any:
    """`data` with every subtree opening at depth `MAX_JSON_DEPTH + 1` cut, without recursion: strings are
    skipped whole by the pattern, so only brackets outside them count."""
    kept: list[bytes] = []
    depth, start, cut_at = 0, 0, -1
    for match in _STRUCTURE.finditer(data):
        bracket = data[match.start()]
        if bracket in b"[{":
            depth += 1
            if depth == MAX_JSON_DEPTH + 1:
                cut_at = match.start()
        elif bracket in b"]}":
            depth -= 1
            if depth == MAX_JSON_DEPTH and cut_at >= 0:
                kept += (data[start:cut_at], _CUT)
                start, cut_at = match.end(), -1
    kept.append(data[start:])
    value = json.loads(b"".join(kept))
    if not isinstance(value, dict):
        return value
    pruned = PrunedJSON(value)
    pruned.pruned = _replace_cuts(pruned)
    return pruned


def _replace_cuts(root: Any) -> list[JSONPath]:
    """Every cut marker in `root` becomes None; returns their paths (an explicit stack: no recursion)."""
    found: list[JSONPath] = []
    stack: list[tuple[Any, JSONPath]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        entries = node.items() if isinstance(node, dict) else enumerate(node)
        for key, child in entries:
            if isinstance(child, dict | list):
                stack.append((child, (*path, key)))
            elif child == _CUT_VALUE:
                node[key] = None
                found.append((*path, key))
    return found


def _json_or_message(data: bytes) -> JSON:
    if not data:
        return {}
    try:
        value = decode_json(data)
    except ValueError:  # not JSON (or not UTF-8): an error page, a proxy's answer
        return {"message": data[:500].decode(errors="replace")}
    return value if isinstance(value, dict) else {"items": value}


def resource_path(
    group: str,
    version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """`/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise."""
    path = "/api/v1" if group in ("", "core") else f"/apis/{group}/{version}"
    if namespace:
        path += f"/namespaces/{namespace}"
    path += f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path
