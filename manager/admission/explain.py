"""What `loadline explain` says about a pod's admission: which ClusterColocationProfile made it what it is.

The mutating webhook names the profiles it applied in the pod's annotation loadline.io/colocation-profile; this
reads the pod from the API server and says that, with what the pod got (QoS class, priority, scheduler, batch
resources).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from common.api import constants as c
from common.kube.http import KubeError, KubeHTTP


def describe_admission(pod: Mapping[str, Any]) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    applied = (meta.get("annotations") or {}).get(c.ANNOTATION_COLOCATION_PROFILE)
    if not applied:
        return "Colocation profile: none (no ClusterColocationProfile applied when the pod was created)"
    got = [f"qosClass {(meta.get('labels') or {}).get(c.LABEL_QOS_CLASS, '-')}",
           f"priority {spec.get('priorityClassName') or '-'} {spec.get('priority', '-')}",
           f"scheduler {spec.get('schedulerName') or '-'}"]  # fmt: skip
    renamed: dict[str, str] = {}
    for container in spec.get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            if name in (c.BATCH_CPU, c.BATCH_MEMORY, c.MID_CPU, c.MID_MEMORY):
                renamed[f"{container.get('name')}"] = f"{renamed.get(str(container.get('name')), '')} {name}={value}"
    got += [f"{container}:{requests}" for container, requests in renamed.items()]
    return f"Colocation profile: {applied.replace(',', ', ')} (applied when the pod was created: {'; '.join(got)})"


async def _read_pod(namespace: str, name: str, kubeconfig: str | None, timeout_seconds: float) -> dict[str, Any]:
    http = await KubeHTTP.connect(kubeconfig, user_agent="loadline-explain")
    try:
        return await http.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}", timeout_seconds=timeout_seconds)
    finally:
        await http.close()


def admission_line(namespace: str, name: str, kubeconfig: str | None, timeout: float) -> str:
    """The line for `loadline explain`; says why when the pod cannot be read."""
    try:
        pod = asyncio.run(_read_pod(namespace, name, kubeconfig, timeout))
    except KubeError as exc:
        return f"Colocation profile: unknown (cannot read the pod from the API server: {exc})"
    except Exception as exc:  # no kubeconfig, no in-cluster account
        return f"Colocation profile: unknown (no API server to read the pod from: {exc})"
    return describe_admission(pod)
