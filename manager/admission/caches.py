"""What the webhooks read, held in memory from watches: ClusterColocationProfiles (digested once per version),
Namespaces (their labels) and PriorityClasses. An admission reads these and nothing else, so it answers in well
under a millisecond; only a namespace created an instant ago and not yet in the watch is read from the API server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from common.api import constants as c
from common.api.colocation import KIND, ColocationProfile, check_profile
from common.api.malformed import MalformedObjectError
from common.api.scheduling import PriorityClassInfo, parse_priority_class
from common.api.validation import aggregate
from common.kube.http import JSON, KubeError, KubeHTTP, resource_path
from common.kube.malformed import MalformedObjects
from common.kube.reflector import EventType, Reflector
from manager.admission import metrics

log = logging.getLogger("loadline.manager.webhook")

NAMESPACE_LOOKUP_TIMEOUT_SECONDS = 2.0


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class AdmissionCaches:
    def __init__(self, http: KubeHTTP) -> None:
        self.http = http
        path = resource_path(c.CONFIG_GROUP, c.CONFIG_VERSION, c.COLOCATION_PROFILE_PLURAL)
        self.profile_objects = Reflector(http, path, name=c.COLOCATION_PROFILE_PLURAL)
        self.namespaces = Reflector(http, "/api/v1/namespaces", name="namespaces")
        self.class_objects = Reflector(http, "/apis/scheduling.k8s.io/v1/priorityclasses", name="priorityclasses")
        self.reflectors = (self.profile_objects, self.namespaces, self.class_objects)
        self.profiles: tuple[ColocationProfile, ...] = ()  # the valid ones, by name
        self.invalid: dict[str, str] = {}  # profile name -> why it cannot be applied
        self.priority_classes: dict[str, PriorityClassInfo] = {}
        self.malformed = MalformedObjects((KIND, "PriorityClass"))
        self._listeners: list[Callable[[], None]] = []
        self.profile_objects.add_handler(self._on_profile)
        self.class_objects.add_handler(self._on_priority_class)
        self.namespaces.add_handler(lambda *_: self._changed())

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self.reflectors)

    def on_change(self, listener: Callable[[], None]) -> None:
        """`listener()` after any profile, namespace or PriorityClass change (the profile checker's trigger)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    def priority_value(self, name: str) -> int | None:
        found = self.priority_classes.get(name)
        return found.value if found is not None else None

    def _on_profile(self, kind: EventType, obj: JSON, _old: JSON | None) -> None:
        self._digest_all()

    def _on_priority_class(self, kind: EventType, obj: JSON, _old: JSON | None) -> None:
        name = _name(obj)
        if kind == "DELETED":
            self.priority_classes.pop(name, None)
            self.malformed.clear("PriorityClass", name)
        else:
            try:
                self.priority_classes[name] = parse_priority_class(obj)
                self.malformed.clear("PriorityClass", name)
            except MalformedObjectError as exc:
                self.priority_classes.pop(name, None)
                self.malformed.report("PriorityClass", name, obj, exc)
        self._digest_all()  # a class's value decides whether a profile's QoS and priority class go together

    def _digest_all(self) -> None:
        valid: list[ColocationProfile] = []
        invalid: dict[str, str] = {}
        for name, obj in self.profile_objects.store.items():
            profile, errors = check_profile(obj, self.priority_value)
            if profile is None:
                invalid[name] = aggregate(errors)
                if self.invalid.get(name) != invalid[name]:
                    self.malformed.report(KIND, name, obj, MalformedObjectError(invalid[name], kind=KIND, name=name))
            else:
                valid.append(profile)
                self.malformed.clear(KIND, name)
        for gone in self.invalid.keys() - invalid.keys():
            self.malformed.clear(KIND, gone)
        self.profiles = tuple(sorted(valid, key=lambda p: p.name))
        self.invalid = invalid
        metrics.PROFILES.labels("valid").set(len(valid))
        metrics.PROFILES.labels("invalid").set(len(invalid))
        self._changed()

    async def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """The namespace's labels; None when it does not exist. Raises KubeError when it cannot be read."""
        obj = self.namespaces.store.get(name)
        if obj is None:
            try:
                obj = await self.http.request("GET", f"/api/v1/namespaces/{name}",
                                              timeout_seconds=NAMESPACE_LOOKUP_TIMEOUT_SECONDS)  # fmt: skip
            except KubeError as exc:
                if exc.is_not_found:
                    return None
                raise
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels if isinstance(labels, dict) else {}
