"""Every pod field, classified by what it does to placement under `loadline scheduler`.

kube-scheduler reads a pod's spec in many places (its plugins, the queue, preemption). A field that
decides where a pod may go and that Loadline does not implement must not be skipped silently: a pod
that sets one is refused (`plugins/podfieldguard.py`: UnschedulableAndUnresolvable, an event naming
the field and saying to use another scheduler). So each field of the types a pod is made of has one
row here, keyed "<OpenAPI type>.<field>":

* `Implemented(plugins)`: the plugins that act on it as kube-scheduler's do;
* `Refused(reason)`: a pod that sets it is refused (`until`: the plugin that will implement it);
* `Irrelevant(why)`: kube-scheduler does not place pods by it either;
* `Split(type)`: its sub-fields are classified one by one, in the rows of that type.

`tests/integration/test_pod_field_coverage.py` walks the real API server's OpenAPI from
io.k8s.api.core.v1.PodSpec and fails on a field without a row (a new Kubernetes field: decide it
here) and on a row for a field the API does not have. Sources of the decisions: the plugins of
k8s.io/kubernetes/pkg/scheduler/framework/plugins (v1.36), which read exactly these fields.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

# The names of kube-scheduler's plugins that act on fields, as the rows cite them.
NODE_RESOURCES_FIT = "NodeResourcesFit"
NODE_AFFINITY = "NodeAffinity"
NODE_PORTS = "NodePorts"
IMAGE_LOCALITY = "ImageLocality"
BALANCED_ALLOCATION = "NodeResourcesBalancedAllocation"
VOLUME_BINDING = "VolumeBinding"
VOLUME_RESTRICTIONS = "VolumeRestrictions"
VOLUME_ZONE = "VolumeZone"
NODE_VOLUME_LIMITS = "NodeVolumeLimits"


@dataclass(frozen=True, slots=True)
class Implemented:
    plugins: tuple[str, ...]  # registered plugins (none: the scheduler itself)
    note: str = ""


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str  # what the field asks for that Loadline does not do
    # When the field alone is not enough (hostUsers only with hostNetwork): given the object that holds
    # the field, whether this pod is refused. None: refused whenever the field is set (non-empty).
    applies: Callable[[Mapping[str, Any]], bool] | None = None
    until: str = ""  # the plugin that will implement it: its registration must turn this row into Implemented


@dataclass(frozen=True, slots=True)
class Irrelevant:
    why: str


@dataclass(frozen=True, slots=True)
class Split:
    type_name: str  # the OpenAPI type (io.k8s.api.core.v1.<type_name>) whose fields have rows of their own


Placement = Implemented | Refused | Irrelevant | Split

ROOT_TYPE: Final = "PodSpec"


def _host_users_with_host_network(spec: Mapping[str, Any]) -> bool:
    # NodeDeclaredFeatures (beta, on in v1.36): such a pod needs nodes that declare UserNamespacesHostNetworkSupport.
    return spec.get("hostUsers") is False and spec.get("hostNetwork") is True


def _restarts_all_containers(container: Mapping[str, Any]) -> bool:
    # NodeDeclaredFeatures: a RestartAllContainers rule needs nodes that declare RestartAllContainersOnContainerExits.
    rules = container.get("restartPolicyRules")
    return isinstance(rules, list) and any(
        isinstance(rule, Mapping) and rule.get("action") == "RestartAllContainers" for rule in rules
    )


def _kubelet(what: str) -> Irrelevant:
    return Irrelevant(f"{what}: the kubelet's business once the pod is on a node")


_CLAIM = Implemented((VOLUME_BINDING, VOLUME_RESTRICTIONS, VOLUME_ZONE, NODE_VOLUME_LIMITS))
# An inline disk that may conflict with another pod's use of it and counts against its CSI driver's attach
# limit (in-tree migration); the others only count (pkg/scheduler/framework/plugins/volumerestrictions,
# nodevolumelimits; common/api/csimigration.py MIGRATION_ON).
_CONFLICTING_DISK = Implemented((VOLUME_RESTRICTIONS, NODE_VOLUME_LIMITS))
_COUNTED_DISK = Implemented((NODE_VOLUME_LIMITS,))
_UNCOUNTED_DISK = Irrelevant("an in-tree volume whose migration kube-scheduler does not count (not in "
                             "csimigration.MIGRATION_ON) and that no plugin checks for conflicts")

FIELDS: Final[dict[str, Placement]] = {
    # ------------------------------------------------------------------ PodSpec
    "PodSpec.volumes": Split("Volume"),
    "PodSpec.initContainers": Split("Container"),
    "PodSpec.containers": Split("Container"),
    "PodSpec.ephemeralContainers": Irrelevant("added to a running pod (ephemeralcontainers subresource), after "
                                              "scheduling; kube-scheduler never reads them"),
    "PodSpec.restartPolicy": _kubelet("restart policy"),
    "PodSpec.terminationGracePeriodSeconds": _kubelet("grace period"),
    "PodSpec.activeDeadlineSeconds": _kubelet("deadline"),
    "PodSpec.dnsPolicy": _kubelet("DNS"),
    "PodSpec.nodeSelector": Implemented((NODE_AFFINITY,)),
    "PodSpec.serviceAccountName": Irrelevant("identity, not placement"),
    "PodSpec.serviceAccount": Irrelevant("identity, not placement (deprecated alias of serviceAccountName)"),
    "PodSpec.automountServiceAccountToken": _kubelet("token mount"),
    "PodSpec.nodeName": Implemented(("NodeName",), "a pod with nodeName is bound already; never queued"),
    "PodSpec.hostNetwork": Implemented((NODE_PORTS,), "the API server defaults each port's hostPort to its "
                                                      "containerPort, which NodePorts counts"),
    "PodSpec.hostPID": _kubelet("PID namespace"),
    "PodSpec.hostIPC": _kubelet("IPC namespace"),
    "PodSpec.shareProcessNamespace": _kubelet("process namespace"),
    "PodSpec.securityContext": _kubelet("security context"),
    "PodSpec.imagePullSecrets": _kubelet("image pulls"),
    "PodSpec.hostname": _kubelet("hostname"),
    "PodSpec.subdomain": _kubelet("DNS subdomain"),
    "PodSpec.affinity": Split("Affinity"),
    "PodSpec.schedulerName": Implemented((), "picks the profile; pods of other schedulers are left alone"),
    "PodSpec.tolerations": Implemented(("TaintToleration",)),
    "PodSpec.hostAliases": _kubelet("/etc/hosts"),
    "PodSpec.priorityClassName": Irrelevant("resolved into spec.priority by the Priority admission plugin"),
    "PodSpec.priority": Implemented(("PrioritySort", "Coscheduling", "DefaultPreemption")),
    "PodSpec.dnsConfig": _kubelet("DNS"),
    "PodSpec.readinessGates": _kubelet("readiness"),
    "PodSpec.runtimeClassName": Irrelevant("the RuntimeClass admission plugin turns it into spec.overhead, "
                                           "nodeSelector and tolerations, which are implemented"),
    "PodSpec.enableServiceLinks": _kubelet("environment"),
    "PodSpec.preemptionPolicy": Implemented(("DefaultPreemption",)),
    "PodSpec.overhead": Implemented((NODE_RESOURCES_FIT, BALANCED_ALLOCATION)),
    "PodSpec.topologySpreadConstraints": Implemented(("PodTopologySpread",)),
    "PodSpec.setHostnameAsFQDN": _kubelet("hostname"),
    "PodSpec.os": Irrelevant("validation only: kube-scheduler does not place by it (nodes are chosen by the "
                             "kubernetes.io/os label through nodeSelector or affinity)"),
    "PodSpec.hostUsers": Refused("hostUsers: false with hostNetwork needs nodes that declare "
                                 "UserNamespacesHostNetworkSupport (kube-scheduler's NodeDeclaredFeatures)",
                                 applies=_host_users_with_host_network),
    "PodSpec.schedulingGates": Implemented(("SchedulingGates",)),
    "PodSpec.resourceClaims": Refused("Dynamic Resource Allocation (kube-scheduler's DynamicResources) is not "
                                      "implemented"),
    "PodSpec.resources": Split("ResourceRequirements"),
    "PodSpec.hostnameOverride": _kubelet("hostname"),
    "PodSpec.schedulingGroup": Refused("Workload API pod groups (kube-scheduler's GangScheduling) are not "
                                       "implemented; Loadline's gangs are Coscheduling PodGroups "
                                       "(scheduling.x-k8s.io)"),
    # ------------------------------------------------------------------ Affinity
    "Affinity.nodeAffinity": Implemented((NODE_AFFINITY,)),
    "Affinity.podAffinity": Implemented(("InterPodAffinity",)),
    "Affinity.podAntiAffinity": Implemented(("InterPodAffinity",)),
    # ------------------------------------------------------------------ Container (init and app containers)
    "Container.name": Irrelevant("a name"),
    "Container.image": Implemented((IMAGE_LOCALITY,)),
    "Container.command": _kubelet("command"),
    "Container.args": _kubelet("arguments"),
    "Container.workingDir": _kubelet("working directory"),
    "Container.ports": Split("ContainerPort"),
    "Container.envFrom": _kubelet("environment"),
    "Container.env": _kubelet("environment"),
    "Container.resources": Split("ResourceRequirements"),
    "Container.resizePolicy": _kubelet("in-place resize"),
    "Container.restartPolicy": Implemented((NODE_RESOURCES_FIT, NODE_PORTS), "Always makes an init container a "
                                           "sidecar: its requests and host ports count for the pod's lifetime"),
    "Container.restartPolicyRules": Refused("a RestartAllContainers rule needs nodes that declare "
                                            "RestartAllContainersOnContainerExits (kube-scheduler's "
                                            "NodeDeclaredFeatures)", applies=_restarts_all_containers),
    "Container.volumeMounts": Irrelevant("names the pod's volumes, which are classified themselves"),
    "Container.volumeDevices": Irrelevant("names the pod's volumes, which are classified themselves"),
    "Container.livenessProbe": _kubelet("probes"),
    "Container.readinessProbe": _kubelet("probes"),
    "Container.startupProbe": _kubelet("probes"),
    "Container.lifecycle": _kubelet("hooks"),
    "Container.terminationMessagePath": _kubelet("termination message"),
    "Container.terminationMessagePolicy": _kubelet("termination message"),
    "Container.imagePullPolicy": Irrelevant("ImageLocality scores images on the node whatever the pull policy"),
    "Container.securityContext": _kubelet("security context"),
    "Container.stdin": _kubelet("stdin"),
    "Container.stdinOnce": _kubelet("stdin"),
    "Container.tty": _kubelet("tty"),
    # ------------------------------------------------------------------ ContainerPort
    "ContainerPort.name": Irrelevant("a name"),
    "ContainerPort.hostPort": Implemented((NODE_PORTS,)),
    "ContainerPort.containerPort": Irrelevant("the port inside the pod's network namespace (with hostNetwork the "
                                              "API server copies it into hostPort)"),
    "ContainerPort.protocol": Implemented((NODE_PORTS,)),
    "ContainerPort.hostIP": Implemented((NODE_PORTS,)),
    # ------------------------------------------------------------------ ResourceRequirements (container and pod level)
    "ResourceRequirements.requests": Implemented((NODE_RESOURCES_FIT, BALANCED_ALLOCATION)),
    "ResourceRequirements.limits": Implemented((NODE_RESOURCES_FIT,), "a request left out defaults to the limit "
                                               "(API server); limits themselves are not placement"),
    "ResourceRequirements.claims": Irrelevant("names entries of spec.resourceClaims, which are refused there"),
    # ------------------------------------------------------------------ Volume
    "Volume.name": Irrelevant("a name"),
    "Volume.hostPath": Irrelevant("a directory of whatever node the pod lands on"),
    "Volume.emptyDir": Irrelevant("node-local scratch space (its sizeLimit is not a request)"),
    "Volume.gcePersistentDisk": _CONFLICTING_DISK,
    "Volume.awsElasticBlockStore": _CONFLICTING_DISK,
    "Volume.gitRepo": _kubelet("gitRepo volume"),
    "Volume.secret": _kubelet("secret volume"),
    "Volume.nfs": Irrelevant("a network mount with no attach limit or scheduling constraint"),
    "Volume.iscsi": _CONFLICTING_DISK,
    "Volume.glusterfs": Irrelevant("a network mount with no attach limit or scheduling constraint"),
    "Volume.persistentVolumeClaim": _CLAIM,
    "Volume.rbd": _CONFLICTING_DISK,
    "Volume.flexVolume": Irrelevant("a driver on the node; no attach limit or scheduling constraint"),
    "Volume.cinder": _COUNTED_DISK,
    "Volume.cephfs": Irrelevant("a network mount with no attach limit or scheduling constraint"),
    "Volume.flocker": Irrelevant("a network mount with no attach limit or scheduling constraint"),
    "Volume.downwardAPI": _kubelet("downward API volume"),
    "Volume.fc": Irrelevant("a Fibre Channel disk: kube-scheduler has no constraint for it"),
    "Volume.azureFile": _UNCOUNTED_DISK,
    "Volume.configMap": _kubelet("configMap volume"),
    "Volume.vsphereVolume": _UNCOUNTED_DISK,
    "Volume.quobyte": Irrelevant("a network mount with no attach limit or scheduling constraint"),
    "Volume.azureDisk": _COUNTED_DISK,
    "Volume.photonPersistentDisk": Irrelevant("kube-scheduler has no constraint for it"),
    "Volume.projected": _kubelet("projected volume"),
    "Volume.portworxVolume": _COUNTED_DISK,
    "Volume.scaleIO": Irrelevant("kube-scheduler has no constraint for it"),
    "Volume.storageos": Irrelevant("kube-scheduler has no constraint for it"),
    "Volume.csi": Irrelevant("CSI ephemeral inline volumes: kube-scheduler counts CSI attach limits only for "
                             "volumes of PersistentVolumeClaims"),
    "Volume.ephemeral": _CLAIM,
    "Volume.image": Implemented((IMAGE_LOCALITY,)),
}


class RefusedField(NamedTuple):
    """A field of one pod that Loadline refuses: where it is and why."""

    path: str  # e.g. "spec.volumes[2].persistentVolumeClaim"
    key: str  # its row in FIELDS, e.g. "Volume.persistentVolumeClaim"
    reason: str


# The refused rows by type: (field, rule), and the field names as a set for a quick first test.
_REFUSED_BY_TYPE: dict[str, list[tuple[str, Refused]]] = {}
for _key, _placement in FIELDS.items():
    if isinstance(_placement, Refused):
        _type, _field = _key.split(".", 1)
        _REFUSED_BY_TYPE.setdefault(_type, []).append((_field, _placement))
_REFUSED_NAMES = {type_name: frozenset(field for field, _ in rows) for type_name, rows in _REFUSED_BY_TYPE.items()}


def _paths_to(type_name: str) -> list[tuple[str, ...]]:
    """The chains of fields from the PodSpec to the objects of a type, by way of the Split rows."""
    if type_name == ROOT_TYPE:
        return [()]
    return [(*path, field)
            for key, rule in FIELDS.items() if isinstance(rule, Split) and rule.type_name == type_name
            for path in _paths_to(key.split(".", 1)[0])
            for field in [key.split(".", 1)[1]]]


_PATHS = {type_name: _paths_to(type_name) for type_name in _REFUSED_BY_TYPE}


def _instances(spec: Mapping[str, Any], path: tuple[str, ...]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, object) of every object at the end of a chain of fields (lists are walked item by item)."""
    level: list[tuple[str, Mapping[str, Any]]] = [("spec", spec)]
    for field in path:
        deeper: list[tuple[str, Mapping[str, Any]]] = []
        for where, obj in level:
            value = obj.get(field)
            if isinstance(value, Mapping):
                deeper.append((f"{where}.{field}", value))
            elif isinstance(value, list):
                deeper.extend((f"{where}.{field}[{i}]", item) for i, item in enumerate(value)
                              if isinstance(item, Mapping))
        level = deeper
    return iter(level)


def _is_set(value: Any) -> bool:
    # An empty object still counts: `persistentVolumeClaim: {}` picks the volume's type (fields decide whether
    # they are used beyond that with a predicate, as pod (anti-)affinity does).
    return value is not None and value not in ([], "")


def refused_fields(spec: Mapping[str, Any]) -> tuple[RefusedField, ...]:
    """The fields of a pod spec that Loadline refuses, each row once (at the first place it is set).
    Runs for every pod the scheduler sees, so an object is looked at only when it has a refused
    field's name among its keys (a refused field is always set, also where a predicate decides)."""
    found: dict[str, RefusedField] = {}
    for type_name, rows in _REFUSED_BY_TYPE.items():
        names = _REFUSED_NAMES[type_name]
        for path in _PATHS[type_name]:
            for where, obj in _instances(spec, path):
                if names.isdisjoint(obj.keys()):
                    continue
                for field, rule in rows:
                    key = f"{type_name}.{field}"
                    if key in found or field not in obj:
                        continue
                    refused = rule.applies(obj) if rule.applies is not None else _is_set(obj.get(field))
                    if refused:
                        found[key] = RefusedField(f"{where}.{field}", key, rule.reason)
    return tuple(found.values())
