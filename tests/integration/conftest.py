"""Fixtures of the integration tests that need more than the control plane of tests/conftest.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import failed
from tests.harness.image import ensure_image
from tests.integration.realnode_cluster import RealCluster, start_real_cluster, stop_real_cluster, wait_for


@pytest.fixture(scope="session")
def real_cluster_session() -> Iterator[RealCluster]:
    """This machine as a real node (plus two kwok nodes) with the Loadline image imported; Loadline itself is
    installed by the first real-node test (`helm install` is what it measures)."""
    image = ensure_image()
    cluster = start_real_cluster(image.archive, image.name)
    print(f"\n[real cluster] {', '.join(f'{k} {v:.1f}s' for k, v in cluster.timings.items())}")
    try:
        yield cluster
    finally:
        stop_real_cluster(cluster)
        print(f"\n[real node] teardown swept: {'; '.join(cluster.node.restored) or 'nothing'}")
    # Leave the machine as we found it: processes, mounts, links, chains, sysctls, cgroups, directories.
    assert cluster.node.leftovers == [], f"the real node left behind: {cluster.node.leftovers}"


@pytest.fixture
def real_cluster(real_cluster_session: RealCluster, request: pytest.FixtureRequest) -> Iterator[RealCluster]:
    """The session's real cluster, with component and Loadline pod logs printed if the test fails."""
    yield real_cluster_session
    if failed(request):
        print("\n" + real_cluster_session.log_report())


@pytest.fixture
def installed(real_cluster: RealCluster) -> None:
    """Loadline installed by its chart on the session's real cluster: test_realnode.py's first test measures `helm install`; a test run on its own (or
    after the uninstall test) installs it here."""
    if not real_cluster.installed:
        real_cluster.install()


@pytest.fixture
def workload_ns(real_cluster: RealCluster, installed: None) -> Iterator[str]:
    name = f"rn-{uuid.uuid4().hex[:6]}"
    real_cluster.plane.kubectl("create", "namespace", name)
    # ServiceAccount admission is on: pods wait for kube-controller-manager to create `default`.
    wait_for("default ServiceAccount", lambda: real_cluster.plane.kubectl(
        "get", "serviceaccount", "default", "-n", name, check=False).returncode == 0, 30)  # fmt: skip
    yield name
    real_cluster.plane.kubectl("delete", "namespace", name, "--wait=true", "--timeout=60s", check=False, timeout=90)
