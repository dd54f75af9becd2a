"""Fixtures of the integration tests that need more than the control plane of tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import failed
from tests.harness.image import ensure_image
from tests.integration.realnode_cluster import RealCluster, start_real_cluster, stop_real_cluster


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
