"""The pods the cgroup collector looks for, as supplied by the caller (later: the API-server pod watch).

Only what is needed to find cgroups and name series: UID, QoS class (it picks the cgroup tier), and the
container statuses' IDs (`containerd://<64 hex>`). Containers without an ID yet are skipped quietly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from common.api.pod import KubeQoSClass  # Kubernetes' QoS class: it picks the pod's cgroup tier


@dataclass(frozen=True, slots=True)
class ContainerRef:
    name: str
    container_id: str  # "<runtime>://<id>" as in status.containerStatuses[].containerID; "" if not started


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str
    qos: KubeQoSClass
    containers: tuple[ContainerRef, ...] = ()


# Pod UIDs are RFC 4122 strings; container IDs are hex. Anything else must not reach a filesystem path.
_POD_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}")
_CONTAINER_HASH = re.compile(r"[0-9a-f]{12,128}")


def valid_pod_uid(uid: str) -> bool:
    return _POD_UID.fullmatch(uid) is not None


def split_container_id(container_id: str) -> tuple[str, str] | None:
    """`containerd://abc...` -> ("containerd", "abc..."); None if malformed."""
    runtime, sep, digest = container_id.partition("://")
    if not sep or not runtime or _CONTAINER_HASH.fullmatch(digest) is None:
        return None
    return runtime, digest
