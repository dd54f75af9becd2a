"""The extender's HTTP side: routes, status codes, 400 with the reason for malformed bodies,
and that no request can stop it from answering the next one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from scheduler_plugin.extender.engine import ExtenderEngine
from scheduler_plugin.extender.main import build_parser, main
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.server import ExtenderServer, normalize_prefix
from scheduler_plugin.framework.clock import FakeClock
from scheduler_plugin.framework.snapshot import Snapshot
from scheduler_plugin.plugins.loadaware.nodeload import NodeLoads
from tests.objects import T0, node, node_metric, pod

Check = Callable[[TestClient[Any, Any]], Awaitable[None]]
GOOD = {"Pod": pod("p"), "Nodes": None, "NodeNames": ["hot", "cold"]}


def make_engine() -> ExtenderEngine:
    snap = Snapshot.from_objects(
        nodes=[node("hot"), node("cold")],
        stores={NodeLoads: [node_metric("hot", cpu="3", memory="1Gi"), node_metric("cold", cpu="200m", memory="1Gi")]},
    )
    frameworks = extender_frameworks(None, snapshot=snap, clock=FakeClock(T0 + 10))
    return ExtenderEngine(frameworks, snap, default_profile=next(iter(frameworks)))


def run(check: Check, *, ready: Callable[[], bool] = lambda: True, prefix: str = "", max_body: int = 2**20,
        engine: ExtenderEngine | None = None) -> None:
    async def go() -> None:
        server = ExtenderServer(engine or make_engine(), ready=ready, prefix=prefix)
        async with TestClient(TestServer(server.app(max_body))) as client:
            await check(client)

    asyncio.run(go())


async def post(client: TestClient[Any, Any], path: str, payload: Any) -> tuple[int, Any]:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    response = await client.post(path, data=data, headers={"Content-Type": "application/json"})
    return response.status, json.loads(await response.text())


def test_filter_and_prioritize_round_trip() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        status, body = await post(client, "/filter", GOOD)
        assert status == 200
        assert body == {"Nodes": None, "NodeNames": ["cold"],
                        "FailedNodes": {"hot": "node(s) cpu usage exceed threshold"},
                        "FailedAndUnresolvableNodes": {}, "Error": ""}
        status, body = await post(client, "/prioritize", GOOD)
        assert status == 200
        assert body == [{"Host": "hot", "Score": 0}, {"Host": "cold", "Score": 10}]  # LoadAware 40 and 75, min-max

    run(check)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"{", "body is not JSON"),
        (b"null", "body: expected a JSON object"),
        ({"Nodes": None, "NodeNames": ["a"]}, "Pod: required"),
        ({"Pod": pod("p"), "Nodes": None, "NodeNames": None}, "Nodes or NodeNames: one is required"),
        ({"Pod": pod("p"), "NodeNames": [1]}, "NodeNames[0]: expected a non-empty string"),
        ({"Pod": pod("p"), "Nodes": {"items": [{}]}}, "Nodes.items[0].metadata.name: required"),
        ({"Pod": pod("p", cpu="a lot"), "NodeNames": ["cold"]}, "Pod: "),
        ({"Pod": {"metadata": {}}, "NodeNames": ["cold"]}, "Pod: metadata.name: required"),
    ],
)
@pytest.mark.parametrize("verb", ["filter", "prioritize"])
def test_malformed_bodies_get_400_with_the_reason_and_the_server_keeps_serving(
    verb: str, payload: Any, reason: str
) -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        status, body = await post(client, f"/{verb}", payload)
        assert status == 400
        assert body["Error"].startswith(reason)
        status, _ = await post(client, f"/{verb}", GOOD)
        assert status == 200
        metrics = await (await client.get("/metrics")).text()
        assert f'loadline_extender_requests_total{{code="400",verb="{verb}"}}' in metrics
        assert f'loadline_extender_bad_requests_total{{verb="{verb}"}}' in metrics

    run(check)


def test_a_body_over_the_limit_gets_413() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        status, body = await post(client, "/filter", {"Pod": pod("p"), "NodeNames": ["n"] * 1000})
        assert status == 413
        assert "Maximum request body size" in body["Error"]
        assert (await post(client, "/filter", GOOD))[0] == 200

    run(check, max_body=2048)


def test_an_unexpected_failure_is_a_500_not_a_crash() -> None:
    engine = make_engine()
    calls = {"n": 0}
    original = engine.filter

    def flaky(args: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise KeyError("surprise")
        return original(args)

    engine.filter = flaky  # type: ignore[method-assign]

    async def check(client: TestClient[Any, Any]) -> None:
        status, body = await post(client, "/filter", GOOD)
        assert status == 500
        assert body["Error"] == "internal error: KeyError: 'surprise'"
        assert (await post(client, "/filter", GOOD))[0] == 200

    run(check, engine=engine)


def test_before_the_caches_sync_requests_get_503_and_readyz_says_so() -> None:
    state = {"ready": False}

    async def check(client: TestClient[Any, Any]) -> None:
        assert (await client.get("/healthz")).status == 200
        assert (await client.get("/readyz")).status == 503
        status, body = await post(client, "/filter", GOOD)
        assert status == 503 and "not synced" in body["Error"]
        state["ready"] = True
        assert (await client.get("/readyz")).status == 200
        assert (await post(client, "/filter", GOOD))[0] == 200

    run(check, ready=lambda: state["ready"])


def test_verbs_are_served_under_the_prefix() -> None:
    async def check(client: TestClient[Any, Any]) -> None:
        assert (await post(client, "/loadline/filter", GOOD))[0] == 200
        assert (await client.post("/filter", data=b"{}")).status == 404
        assert (await client.get("/loadline/filter")).status == 405
        assert (await client.get("/healthz")).status == 200

    run(check, prefix="/loadline/")


@pytest.mark.parametrize(("raw", "expected"), [("", ""), ("/", ""), ("scheduler", "/scheduler"),
                                               ("/a/b/", "/a/b")])
def test_prefix_normalisation(raw: str, expected: str) -> None:
    assert normalize_prefix(raw) == expected


def test_help_names_the_flags_and_the_limits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as excinfo:
        main(["--help"])
    assert excinfo.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--kubeconfig", "--port", "--config", "--url-prefix", "nodeCacheCapable", "Coscheduling"):
        assert flag in out
    assert build_parser().parse_args([]).port == 10262


def test_an_invalid_config_exits_2_with_the_field(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("profiles:\n- plugins: {multiPoint: {enabled: [{name: Coscheduling}]}}\n")
    assert main(["--config", str(config)]) == 2
    assert "profiles[0].plugins.multiPoint.enabled[0].name: Coscheduling" in capsys.readouterr().err
    assert main(["--config", str(tmp_path / "missing.yaml")]) == 2
