from __future__ import annotations

from pathlib import Path

import pytest

from agent.collectors.cgroup_layout import CgroupDriver, CgroupVersion, detect_layout
from agent.collectors.pods import split_container_id, valid_pod_uid
from common.api.pod import KubeQoSClass
from tests.fakes.cgroup_trees import FakeCgroupTree

UID = "0f1e2d3c-aaaa-bbbb-cccc-000011112222"
CID = "a" * 64

V1, V2 = CgroupVersion.V1, CgroupVersion.V2
SYSTEMD, CGROUPFS = CgroupDriver.SYSTEMD, CgroupDriver.CGROUPFS


@pytest.mark.parametrize("version", [V1, V2])
@pytest.mark.parametrize("driver", [SYSTEMD, CGROUPFS])
def test_detects_version_and_driver(tmp_path: Path, version: CgroupVersion, driver: CgroupDriver) -> None:
    FakeCgroupTree(tmp_path, version, driver)
    layout = detect_layout(tmp_path)
    assert layout is not None
    assert (layout.version, layout.driver) == (version, driver)
    kubepods = "kubepods.slice" if driver is SYSTEMD else "kubepods"
    if version is V1:
        assert layout.cpuacct == str(tmp_path / "cpuacct" / kubepods)
        assert layout.memory == str(tmp_path / "memory" / kubepods)
        assert not layout.psi
    else:
        assert layout.cpu == layout.cpuacct == layout.memory == str(tmp_path / kubepods)
        assert layout.psi


def test_hybrid_host_is_v1(tmp_path: Path) -> None:
    FakeCgroupTree(tmp_path, V1, CGROUPFS, hybrid=True)  # <root>/unified/cgroup.controllers exists
    layout = detect_layout(tmp_path)
    assert layout is not None and layout.version is V1


def test_co_mounted_cpu_cpuacct_without_symlinks(tmp_path: Path) -> None:
    (tmp_path / "cpu,cpuacct" / "kubepods.slice").mkdir(parents=True)
    (tmp_path / "memory" / "kubepods.slice").mkdir(parents=True)
    layout = detect_layout(tmp_path)
    assert layout is not None
    assert layout.cpu == layout.cpuacct == str(tmp_path / "cpu,cpuacct" / "kubepods.slice")


def test_parent_prefix_and_absent_hierarchy(tmp_path: Path) -> None:
    assert detect_layout(tmp_path) is None  # no controllers at all
    FakeCgroupTree(tmp_path, V1, CGROUPFS, parent="custom/root")
    assert detect_layout(tmp_path) is None  # kubepods is not directly below the mount
    layout = detect_layout(tmp_path, "custom/root")
    assert layout is not None and layout.cpu == str(tmp_path / "cpu" / "custom" / "root" / "kubepods")
    with pytest.raises(ValueError):
        detect_layout(tmp_path, "../escape")


def test_forced_version_and_driver(tmp_path: Path) -> None:
    FakeCgroupTree(tmp_path, V2, CGROUPFS)
    layout = detect_layout(tmp_path, version=V2, driver=SYSTEMD)  # trust the operator
    assert layout is not None and layout.driver is SYSTEMD and layout.cpu.endswith("kubepods.slice")


@pytest.mark.parametrize(
    ("driver", "qos", "expected"),
    [
        (CGROUPFS, KubeQoSClass.GUARANTEED, f"pod{UID}"),
        (CGROUPFS, KubeQoSClass.BURSTABLE, f"burstable/pod{UID}"),
        (CGROUPFS, KubeQoSClass.BEST_EFFORT, f"besteffort/pod{UID}"),
        (SYSTEMD, KubeQoSClass.GUARANTEED, "kubepods-pod0f1e2d3c_aaaa_bbbb_cccc_000011112222.slice"),
        (
            SYSTEMD,
            KubeQoSClass.BURSTABLE,
            "kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_aaaa_bbbb_cccc_000011112222.slice",
        ),
        (
            SYSTEMD,
            KubeQoSClass.BEST_EFFORT,
            "kubepods-besteffort.slice/kubepods-besteffort-pod0f1e2d3c_aaaa_bbbb_cccc_000011112222.slice",
        ),
    ],
)
def test_pod_dirs_per_qos_tier(tmp_path: Path, driver: CgroupDriver, qos: KubeQoSClass, expected: str) -> None:
    FakeCgroupTree(tmp_path, V2, driver)
    layout = detect_layout(tmp_path)
    assert layout is not None and layout.pod_dir(qos, UID) == expected


@pytest.mark.parametrize(
    ("driver", "runtime", "expected"),
    [
        (SYSTEMD, "containerd", (f"cri-containerd-{CID}.scope",)),
        (SYSTEMD, "cri-o", (f"crio-{CID}.scope",)),
        (SYSTEMD, "docker", (f"docker-{CID}.scope",)),
        (CGROUPFS, "containerd", (CID,)),
        (CGROUPFS, "cri-o", (CID, f"crio-{CID}")),
    ],
)
def test_container_dirs_per_runtime(tmp_path: Path, driver: CgroupDriver, runtime: str, expected: tuple) -> None:
    FakeCgroupTree(tmp_path, V1, driver)
    layout = detect_layout(tmp_path)
    assert layout is not None and layout.container_dirs(runtime, CID) == expected


def test_ids_that_cannot_name_a_cgroup_are_rejected() -> None:
    assert split_container_id(f"containerd://{CID}") == ("containerd", CID)
    assert split_container_id(CID) is None
    assert split_container_id("containerd://../../etc/passwd") is None
    assert split_container_id("containerd://") is None
    assert valid_pod_uid(UID)
    assert not valid_pod_uid("../x") and not valid_pod_uid("a/b") and not valid_pod_uid("")
