"""Koordinator's own components, built by the harness from the Go module proxy at the pinned version.

They are Loadline's peer in compatibility tests and benchmarks; this checks the build the harness caches is real:
each binary runs and is the component it claims to be, and the module carries the CRDs its components need.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.harness import koordbuild

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("koord-scheduler", "The Koordinator scheduler"),
        ("koord-descheduler", "--config"),
        ("koord-manager", "--feature-gates"),
        ("koordlet", "prediction-cold-start-duration"),  # built with cgo (libpfm4)
    ],
)
def test_component_runs(name: str, says: str) -> None:
    path = koordbuild.ensure([name])[name]
    assert f"{name}-v{koordbuild.KOORDINATOR_VERSION}" in str(path)
    out = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert says in out.stdout + out.stderr, (out.returncode, (out.stdout + out.stderr)[:2000])


def test_module_carries_the_crds_its_components_need() -> None:
    crds = {p.name for p in koordbuild.crd_dir().glob("*.yaml")}
    # koord-scheduler's informers need Reservation and Device; koord-descheduler needs PodMigrationJob; the NodeMetric
    # and NodeSLO CRDs are Koordinator's own versions of the objects Loadline writes
    for needed in (
        "scheduling.koordinator.sh_reservations.yaml",
        "scheduling.koordinator.sh_devices.yaml",
        "scheduling.koordinator.sh_podmigrationjobs.yaml",
        "slo.koordinator.sh_nodemetrics.yaml",
        "slo.koordinator.sh_nodeslos.yaml",
    ):
        assert needed in crds, sorted(crds)
