"""One object never stops a watch; failing lists back off and show (common/kube/reflector.py, common/kube/http.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping

import pytest
from prometheus_client import REGISTRY

from common.kube import reflector as reflector_module
from common.kube.http import JSON, MAX_JSON_DEPTH, KubeError, PrunedJSON, decode_json
from common.kube.reflector import INITIAL_BACKOFF_SECONDS, Reflector

DEPTH = 1_100  # the example: deeper than orjson (1,024) and json (the recursion limit) decode


def deep(levels: int) -> str:
    return '{"x":' * levels + "1" + "}" * levels


def nodemetric(name: str, version: int, extensions: str = "{}") -> str:
    return (
        f'{{"kind":"NodeMetric","metadata":{{"name":"{name}","resourceVersion":"{version}"}},'
        f'"status":{{"podsMetric":[{{"name":"p","namespace":"d","extensions":{extensions}}}]}}}}'
    )


def malformed(kind: str, reason: str) -> float:
    value = REGISTRY.get_sample_value("loadline_malformed_objects_total", {"kind": kind, "reason": reason})
    return value or 0.0


class FakeAPI:
    """Answers LIST from `pages` (raw bytes, decoded as KubeHTTP does) and WATCH from `events`; then waits."""

    def __init__(self, page: bytes, events: list[bytes], list_failures: int = 0) -> None:
        self.page, self.events, self.list_failures = page, events, list_failures
        self.lists = 0

    async def get(self, path: str, **params: str | int) -> JSON:
        self.lists += 1
        if self.lists <= self.list_failures:
            raise KubeError(0, "ClientConnectorError: connection refused")
        value: JSON = decode_json(self.page)
        return value

    async def watch_lines(
        self, path: str, params: Mapping[str, str | int], read_timeout_seconds: float
    ) -> AsyncIterator[JSON]:
        for line in self.events:
            yield decode_json(line)
        await asyncio.Event().wait()


def test_a_document_too_deep_to_decode_comes_back_with_the_deep_part_cut() -> None:
    line = f'{{"type":"ADDED","object":{nodemetric("n", 1, deep(DEPTH))}}}'.encode()
    with pytest.raises(RecursionError):
        json.loads(line)  # what decoding did before: neither a KubeError nor a ValueError
    event = decode_json(line)
    assert isinstance(event, PrunedJSON)
    assert [path[:2] for path in event.pruned] == [("object", "status")]
    part = event["object"]["status"]["podsMetric"][0]["extensions"]
    levels = 0
    while isinstance(part, dict):
        part, levels = part["x"], levels + 1
    assert part is None and levels == MAX_JSON_DEPTH - 5  # object, status, podsMetric, [0] and the event hold 5
    assert event["object"]["metadata"] == {"name": "n", "resourceVersion": "1"}


def test_strings_that_look_like_brackets_are_not_counted() -> None:
    text = '{"a":"[[[{{{\\"]]]","b":' + deep(DEPTH) + "}"
    value = decode_json(text.encode())
    assert value["a"] == '[[[{{{"]]]'
    assert isinstance(value, PrunedJSON) and len(value.pruned) == 1


def test_one_deep_nodemetric_is_malformed_and_the_watch_goes_on_with_the_rest() -> None:
    page = (
        '{"kind":"NodeMetricList","metadata":{"resourceVersion":"5"},"items":['
        + ",".join([nodemetric("good", 2), nodemetric("deep", 3, deep(DEPTH))])
        + "]}"
    ).encode()
    events = [
        f'{{"type":"MODIFIED","object":{nodemetric("deep", 6, deep(DEPTH))}}}'.encode(),
        f'{{"type":"ADDED","object":{nodemetric("later", 7)}}}'.encode(),
        f'{{"type":"MODIFIED","object":{nodemetric("deep", 8)}}}'.encode(),  # fixed
    ]
    before = malformed("NodeMetric", "too_deep")

    async def run() -> tuple[list[tuple[str, str]], Reflector, int]:
        api = FakeAPI(page, events)
        reflector = Reflector(api, "/apis/slo.koordinator.sh/v1alpha1/nodemetrics")  # type: ignore[arg-type]
        seen: list[tuple[str, str]] = []
        reflector.add_handler(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
        task = asyncio.create_task(reflector.run())
        for _ in range(100):
            await asyncio.sleep(0)
            if len(seen) == 4:
                assert ("NodeMetric", "deep") in reflector_module.UNREADABLE.current()
        task.cancel()
        return seen, reflector, api.lists

    seen, reflector, lists = asyncio.run(run())
    assert sorted(seen[:2]) == [("ADDED", "deep"), ("ADDED", "good")]
    assert seen[2:] == [("MODIFIED", "deep"), ("ADDED", "later"), ("MODIFIED", "deep")]
    assert lists == 1  # no relist
    assert reflector.resource_version == "8"
    assert ("NodeMetric", "deep") not in reflector_module.UNREADABLE.current()  # readable again: forgotten
    assert malformed("NodeMetric", "too_deep") == before + 2  # versions 3 and 6, once each


def test_a_handler_that_raises_reports_the_object_once_per_version_and_the_watch_goes_on() -> None:
    page = b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}'
    events = [
        b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"bad","namespace":"d","resourceVersion":"2"}}}',
        b'{"type":"MODIFIED","object":{"kind":"Pod","metadata":{"name":"bad","namespace":"d","resourceVersion":"2"}}}',
        b'{"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"ok","namespace":"d","resourceVersion":"3"}}}',
    ]
    before = malformed("Pod", "invalid_value")
    seen: list[str] = []

    def handler(kind: str, obj: JSON, old: JSON | None) -> None:
        if obj["metadata"]["name"] == "bad":
            raise OverflowError("date value out of range")
        seen.append(obj["metadata"]["name"])

    async def run() -> None:
        reflector = Reflector(FakeAPI(page, events), "/api/v1/pods")  # type: ignore[arg-type]
        reflector.add_handler(handler)  # type: ignore[arg-type]
        task = asyncio.create_task(reflector.run())
        for _ in range(50):
            await asyncio.sleep(0)
        task.cancel()

    asyncio.run(run())
    assert seen == ["ok"]
    assert malformed("Pod", "invalid_value") == before + 1


def test_failing_lists_back_off_exponentially_with_jitter_are_counted_and_stall(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_sleep = asyncio.sleep
    waits: list[float] = []
    clock = [0.0]

    async def instant_sleep(seconds: float) -> None:  # the backoff's waits, on a fake clock
        waits.append(seconds)
        clock[0] += seconds
        await real_sleep(0)

    page = b'{"kind":"NodeList","metadata":{"resourceVersion":"1"},"items":[]}'

    async def run() -> tuple[list[str | None], float, float]:
        monkeypatch.setattr(asyncio.get_running_loop(), "time", lambda: clock[0])
        monkeypatch.setattr(reflector_module.asyncio, "sleep", instant_sleep)
        api = FakeAPI(page, [], list_failures=12)
        reflector = Reflector(api, "/api/v1/nodes", name="t-nodes")  # type: ignore[arg-type]
        relists = REGISTRY.get_sample_value("loadline_kube_relists_total", {"resource": "t-nodes"}) or 0.0
        stalls: list[str | None] = []
        task = asyncio.create_task(reflector.run())
        while not reflector.synced.is_set():
            stalls.append(reflector.stalled())
            await real_sleep(0)
        failing_after = reflector.failing_seconds()
        task.cancel()
        count = (REGISTRY.get_sample_value("loadline_kube_relists_total", {"resource": "t-nodes"}) or 0.0) - relists
        return stalls, failing_after, count

    stalls, failing_after, relists = asyncio.run(run())
    assert len(waits) == 12 and relists == 13
    ratios = []
    for attempt, wait in enumerate(waits):
        base = min(INITIAL_BACKOFF_SECONDS * 2**attempt, 30.0)  # doubling up to the reflector's maximum
        assert 0.5 * base <= wait < 1.5 * base, (attempt, wait)
        ratios.append(wait / base)
    assert len(set(ratios)) > 1  # jittered
    assert any(s is not None and "t-nodes failing for" in s for s in stalls)  # 60 s failing without progress
    assert failing_after == 0.0  # the list answered: progress


def test_410s_before_any_event_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watch answered with 410 Gone re-lists at once the first time, then backs off until an event arrives."""
    real_sleep = asyncio.sleep
    waits: list[float] = []

    async def instant_sleep(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(0)

    gone = b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}'

    class GoneAPI(FakeAPI):
        async def watch_lines(
            self, path: str, params: Mapping[str, str | int], read_timeout_seconds: float
        ) -> AsyncIterator[JSON]:
            yield decode_json(gone)

    async def run() -> int:
        monkeypatch.setattr(reflector_module.asyncio, "sleep", instant_sleep)
        api = GoneAPI(b'{"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]}', [])
        task = asyncio.create_task(Reflector(api, "/api/v1/pods", name="t-gone").run())  # type: ignore[arg-type]
        while api.lists < 6:
            await real_sleep(0)
        task.cancel()
        return api.lists

    lists = asyncio.run(run())
    assert lists >= 6 and len(waits) >= 4
    for attempt, wait in enumerate(waits[:4]):
        base = INITIAL_BACKOFF_SECONDS * 2 ** (attempt + 1)  # the first re-list is at once, then 1 s, 2 s, ...
        assert 0.5 * base <= wait < 1.5 * base, (attempt, wait)
