"""Warning Events on ClusterColocationProfiles that cannot do what they say (the leader writes them).

A profile that names a PriorityClass that does not exist, whose namespaceSelector matches no namespace, or that
cannot be applied at all (it got into the cluster while no validating webhook ran) never refuses a pod: the pods
are created without it. The user finds out here: `kubectl describe clustercolocationprofile <name>` shows the
Event, once per problem for as long as it lasts (again if it comes back).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from common.api import constants as c
from common.api.colocation import ColocationProfile
from common.kube.events import EventRecorder
from manager.admission.caches import AdmissionCaches

log = logging.getLogger("loadline.manager.webhook")

INVALID, NO_CLASS, NO_NAMESPACE = "InvalidProfile", "PriorityClassNotFound", "NoNamespaceMatched"
DEBOUNCE_SECONDS = 1.0


def profile_problems(
    profiles: Iterable[ColocationProfile],
    invalid: Mapping[str, str],
    namespace_labels: Mapping[str, Mapping[str, str]],
    priority_classes: Iterable[str],
) -> dict[str, list[tuple[str, str]]]:
    """Per profile name, its (reason, note) problems. `namespace_labels`: the namespaces a profile may apply to."""
    classes = set(priority_classes)
    found: dict[str, list[tuple[str, str]]] = {
        name: [(INVALID, f"not applied to any pod: {why}")] for name, why in invalid.items()
    }
    for profile in profiles:
        problems = []
        if profile.priority_class_name and profile.priority_class_name not in classes:
            problems.append((NO_CLASS, f"PriorityClass {profile.priority_class_name} does not exist: the pods this "
                                       "profile selects are created without it until the class exists"))  # fmt: skip
        selector = profile.namespace_selector
        if selector is not None and not any(selector.matches(labels) for labels in namespace_labels.values()):
            problems.append((NO_NAMESPACE, "namespaceSelector matches no namespace Loadline admits pods of: the "
                                           "profile applies to no pod"))  # fmt: skip
        if problems:
            found[profile.name] = problems
    return found


class ProfileChecker:
    def __init__(self, caches: AdmissionCaches, recorder: EventRecorder, skip_namespaces: Iterable[str]) -> None:
        self.caches, self.recorder, self.skip = caches, recorder, frozenset(skip_namespaces)
        self._dirty = asyncio.Event()
        self._reported: dict[str, set[tuple[str, str]]] = {}  # profile uid -> problems already evented
        caches.on_change(self._dirty.set)

    def _namespaces(self) -> dict[str, Mapping[str, str]]:
        return {name: (obj.get("metadata") or {}).get("labels") or {}
                for name, obj in self.caches.namespaces.store.items() if name not in self.skip}  # fmt: skip

    async def run(self) -> None:
        """Until cancelled (the leader runs it): check after every change, a second after the last of a burst."""
        self._dirty.set()
        while True:
            await self._dirty.wait()
            with contextlib.suppress(TimeoutError):
                while True:  # debounce: a burst of namespace events is one check
                    self._dirty.clear()
                    await asyncio.wait_for(self._dirty.wait(), DEBOUNCE_SECONDS)
            if self.caches.synced:
                await self.check()

    async def check(self) -> None:
        problems = profile_problems(self.caches.profiles, self.caches.invalid, self._namespaces(),
                                    self.caches.priority_classes)  # fmt: skip
        objects = self.caches.profile_objects.store
        current: dict[str, set[tuple[str, str]]] = {}
        for name, found in problems.items():
            obj = objects.get(name)
            if obj is None:
                continue
            uid = str((obj.get("metadata") or {}).get("uid") or name)
            current[uid] = set(found)
            for reason, note in found:
                if (reason, note) in self._reported.get(uid, set()):
                    continue
                await self._record(obj, reason, note)
        self._reported = current

    async def _record(self, obj: Mapping[str, Any], reason: str, note: str) -> None:
        regarding = {"apiVersion": c.CONFIG_API_VERSION, "kind": c.COLOCATION_PROFILE_KIND, **obj}
        log.warning("ClusterColocationProfile %s: %s", (obj.get("metadata") or {}).get("name"), note)
        await self.recorder.record(regarding, reason=reason, action="Admit", note=note, type="Warning")
