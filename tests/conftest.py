"""Fixtures that run the real Kubernetes components (built by tests/harness/build.py).

`control_plane` is session-wide: one etcd + kube-apiserver for the whole run, torn down
at the end (also after failures). Tests isolate themselves by names and namespaces.
When a test that used the control plane fails, the tails of every component's log are
printed with its report.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import pytest

from tests.harness.controlplane import ControlPlane, fake_node
from tests.harness.processes import Component
from tests.harness.promtool import PromtoolMissing, ensure_promtool


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    # A CI runner or `timeout` stops a run with SIGTERM, which would kill pytest without running a single
    # fixture teardown (etcd, kube-apiserver, the real node would be left behind). As an interrupt, pytest
    # unwinds every fixture first, as it does on Ctrl-C.
    signal.signal(signal.SIGTERM, _interrupt)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[Any]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


def failed(request: pytest.FixtureRequest) -> bool:
    """Whether the test of `request` failed in setup or in its body (fixtures print component logs then)."""
    return any(
        getattr(request.node, f"rep_{when}", None) is not None and getattr(request.node, f"rep_{when}").failed
        for when in ("setup", "call")
    )


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    plane = ControlPlane.start()
    print(f"\n[control plane] etcd + kube-apiserver ready in {plane.startup_seconds:.1f}s at {plane.server}")
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def cluster(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """The session control plane, with component logs printed if this test fails."""
    yield control_plane
    if failed(request):
        print("\n" + control_plane.log_report())


def namespace_in(plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace of `plane` for one test (body of the `namespace` fixtures); deleted afterwards."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    plane.kubectl("create", "namespace", name)
    yield name
    plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def namespace(cluster: ControlPlane) -> Iterator[str]:
    yield from namespace_in(cluster)


@pytest.fixture(scope="session")
def kwok(control_plane: ControlPlane) -> Component:
    """kwok managing fake nodes of the session control plane."""
    return control_plane.start_kwok()


@pytest.fixture
def kwok_nodes(cluster: ControlPlane, kwok: Component) -> Iterator[Callable[..., list[str]]]:
    """Factory: `kwok_nodes(n, cpu="32", memory="256Gi", labels=...)` creates n Ready fake nodes; deleted afterwards."""
    created: list[str] = []

    def make(count: int, *, prefix: str | None = None, timeout: float = 120, **node_args: Any) -> list[str]:
        prefix = prefix or f"n{uuid.uuid4().hex[:6]}"
        names = [f"{prefix}-{i}" for i in range(count)]
        cluster.apply([fake_node(name, **node_args) for name in names])
        created.extend(names)
        cluster.kubectl(
            "wait", "--for=condition=Ready", "node", *names, f"--timeout={int(timeout)}s", timeout=timeout + 10
        )
        return names

    yield make
    if created:
        cluster.kubectl("delete", "node", *created, "--wait=false", check=False)


def _own_control_plane(request: pytest.FixtureRequest, *, install_crds: bool) -> Iterator[ControlPlane]:
    plane = ControlPlane.start(install_crds=install_crds)
    try:
        yield plane
    finally:
        if failed(request):
            print("\n" + plane.log_report())
        plane.stop()


def module_plane(
    setup: Callable[[ControlPlane], object] = lambda plane: None,
) -> tuple[object, object]:  # pytest's fixture type is not public; the module binds them by name
    """Fixtures `own_plane` and `plane` for a test module whose components act on every Node (or NodeMetric, ...)
    they see, so it cannot share the session control plane: `own_plane, plane = module_plane(setup)`.

    `own_plane` (module scope): a control plane of the module's own with kwok, then `setup(plane)`; stopped after
    the module's last test. `plane` (per test): that plane; the components the test started (`plane.extra`) are
    stopped after it, so the next test starts from none of them, and the logs are printed when it failed.
    """

    @pytest.fixture(scope="module", name="own_plane")
    def own_plane() -> Iterator[ControlPlane]:
        """This module's control plane with kwok (see `module_plane`)."""
        started = ControlPlane.start()
        try:
            started.start_kwok()
            setup(started)
            yield started
        finally:
            started.stop()

    @pytest.fixture(name="plane")
    def plane(own_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
        """The module's plane; what this test started is stopped afterwards, logs printed when it failed."""
        before = len(own_plane.extra)
        yield own_plane
        if failed(request):
            print("\n" + own_plane.log_report(80))
        for component in own_plane.extra[before:]:
            component.stop()

    return own_plane, plane


@pytest.fixture
def fresh_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane of its own, for tests that stop or restart the API server."""
    yield from _own_control_plane(request, install_crds=True)


@pytest.fixture
def bare_control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    """A control plane of its own without our CRDs, for tests of what happens before they are installed.

    (Deleting a CRD seconds after creating it can leave the API server's CRD finalizer waiting on storage that
    is still initialising, so such tests must not start from a plane that has them.)
    """
    yield from _own_control_plane(request, install_crds=False)


@pytest.fixture
def kube_scheduler(cluster: ControlPlane) -> Iterator[Callable[..., Component]]:
    """Factory: start the real kube-scheduler with the given profiles/config; stopped after the test."""
    started: list[Component] = []

    def start(profiles: list[dict[str, Any]] | None = None, **config: Any) -> Component:
        scheduler = cluster.start_kube_scheduler(profiles, name=f"kube-scheduler-{uuid.uuid4().hex[:6]}", **config)
        started.append(scheduler)
        return scheduler

    yield start
    for scheduler in started:
        cluster.stop_component(scheduler)


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (`promtool check metrics`); a missing one fails the test with how to get it."""
    try:
        return str(ensure_promtool())
    except PromtoolMissing as exc:
        pytest.fail(str(exc))
