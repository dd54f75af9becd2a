"""CRD assembly: names, scope, versions, printer columns."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from common.api.crdgen.colocation import colocation_profile_spec
from common.api.crdgen.from_model import field_schema
from common.api.crdgen.podgroup import pod_group_schemas
from common.api.crdgen.schema import API_APPROVED, Schema, empty_obj, obj, string
from common.api.nodemetric import NodeMetric
from common.api.nodeslo import NodeSLO

# --------------------------------------------------------------------------------------------------
# CRD assembly
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrinterColumn:
    name: str
    type: str
    json_path: str
    description: str
    priority: int = 0

    def render(self) -> Schema:
        col: Schema = {
            "name": self.name,
            "type": self.type,
            "jsonPath": self.json_path,
            "description": self.description,
        }
        if self.priority:
            col["priority"] = self.priority
        return col


AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since the object was created.")


@dataclass(frozen=True)
class CRD:
    group: str
    kind: str
    plural: str
    singular: str
    scope: str
    spec: Schema
    status: Schema
    description: str
    version: str = "v1alpha1"
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    status_subresource: bool = True

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"

    @property
    def filename(self) -> str:
        return f"{self.group}_{self.plural}.yaml"

    def render(self) -> Schema:
        names: Schema = {
            "kind": self.kind,
            "listKind": f"{self.kind}List",
            "plural": self.plural,
            "singular": self.singular,
        }
        if self.short_names:
            names["shortNames"] = list(self.short_names)
        if self.categories:
            names["categories"] = list(self.categories)
        root = obj(
            {
                "apiVersion": string("Versioned schema of this representation of an object."),
                "kind": string("REST resource this object represents, in CamelCase."),
                "metadata": {"type": "object"},
                "spec": self.spec,
                "status": self.status,
            },
            self.description,
        )
        version: Schema = {
            "name": self.version,
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": root},
        }
        if self.status_subresource:
            version["subresources"] = {"status": {}}
        if self.columns:
            version["additionalPrinterColumns"] = [c.render() for c in self.columns]
        metadata: Schema = {"name": self.name}
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        return {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": metadata,
            "spec": {
                "group": self.group,
                "names": names,
                "scope": self.scope,
                "versions": [version],
            },
        }


def node_metric_crd() -> CRD:
    usage = ".status.nodeMetric.nodeUsage.resources"
    return CRD(
        group="slo.koordinator.sh",
        kind="NodeMetric",
        plural="nodemetrics",
        singular="nodemetric",
        scope="Cluster",
        description="NodeMetric holds the resource usage of one node (name = node name), reported by the node agent.",
        spec=field_schema(NodeMetric, "spec"),
        status=field_schema(NodeMetric, "status"),
        short_names=("nm",),
        categories=("loadline",),
        columns=(
            PrinterColumn("CPU", "string", f"{usage}.cpu", "Current CPU usage of the node."),
            # As written: a printer column is a JSONPath and a type (integer, number, string, boolean, date); none
            # formats bytes, and the agent writes Koordinator's form (whole bytes, BinarySI). README "API objects".
            PrinterColumn(
                "Memory", "string", f"{usage}.memory", "Current memory usage of the node (bytes; Ki when a multiple)."
            ),
            # aggregatedNodeUsages[0] is the shortest window: the Loadline agent writes the windows shortest
            # first (Koordinator's koordlet follows spec order, by default 5m, 10m, 30m as well).
            PrinterColumn(
                "P95-CPU",
                "string",
                ".status.nodeMetric.aggregatedNodeUsages[0].usage.p95.resources.cpu",
                "p95 CPU usage over the shortest aggregation window (the agent writes windows shortest first).",
            ),
            PrinterColumn("Updated", "date", ".status.updateTime", "Time since the agent last reported."),
            AGE,
        ),
    )


def node_slo_crd() -> CRD:
    return CRD(
        group="slo.koordinator.sh",
        kind="NodeSLO",
        plural="nodeslos",
        singular="nodeslo",
        scope="Cluster",
        description="NodeSLO holds the QoS/SLO configuration of one node (name = node name).",
        spec=field_schema(NodeSLO, "spec"),
        status=field_schema(NodeSLO, "status"),
        categories=("loadline",),
        # The watermarks a person checks first: is best-effort colocation on, where BE CPU is suppressed and where
        # BE pods are evicted. Absent fields print as <none>, which is what they mean (the agent's defaults apply).
        columns=(
            PrinterColumn("BE", "boolean", f"{_BE}.enable", "Whether best-effort (batch) colocation is enforced."),
            PrinterColumn(
                "CPU-Suppress",
                "integer",
                f"{_BE}.cpuSuppressThresholdPercent",
                "Node CPU usage (% of capacity) above which best-effort pods' CPU is suppressed.",
            ),
            PrinterColumn(
                "Suppress-Policy", "string", f"{_BE}.cpuSuppressPolicy", "How BE CPU is suppressed."
            ),
            PrinterColumn(
                "Mem-Evict",
                "integer",
                f"{_BE}.memoryEvictThresholdPercent",
                "Node memory usage (% of capacity) above which best-effort pods are evicted.",
            ),
            PrinterColumn(
                "CPU-Evict-Satisfaction",
                "integer",
                f"{_BE}.cpuEvictBESatisfactionLowerPercent",
                "BE CPU satisfaction (% of request) below which best-effort pods are evicted.",
                priority=1,
            ),
            AGE,
        ),
    )


_BE = ".spec.resourceUsedThresholdWithBE"


def pod_group_x_k8s_crd() -> CRD:
    spec, status = pod_group_schemas(
        min_member_minimum=1,
        phases=["Pending", "Running", "Scheduling", "Unknown", "Finished", "Failed"],
        with_scheduled=False,
    )
    return CRD(
        group="scheduling.x-k8s.io",
        kind="PodGroup",
        plural="podgroups",
        singular="podgroup",
        scope="Namespaced",
        description="PodGroup is a group of pods scheduled all-or-nothing (coscheduling).",
        spec=spec,
        status=status,
        short_names=("pg", "pgs"),
        columns=(
            PrinterColumn("Phase", "string", ".status.phase", "Current phase of the PodGroup."),
            PrinterColumn("MinMember", "integer", ".spec.minMember", "Minimal number of members."),
            PrinterColumn("Running", "integer", ".status.running", "Number of running pods."),
            PrinterColumn("Succeeded", "integer", ".status.succeeded", "Number of succeeded pods."),
            PrinterColumn("Failed", "integer", ".status.failed", "Number of failed pods."),
            AGE,
        ),
        annotations={API_APPROVED: "https://github.com/kubernetes-sigs/scheduler-plugins/pull/50"},
    )


def pod_group_sigs_k8s_crd() -> CRD:
    spec, status = pod_group_schemas(
        min_member_minimum=None,
        phases=["Pending", "PreScheduling", "Scheduling", "Scheduled", "Running", "Finished", "Failed", "Unknown"],
        with_scheduled=True,
    )
    return CRD(
        group="scheduling.sigs.k8s.io",
        kind="PodGroup",
        plural="podgroups",
        singular="podgroup",
        scope="Namespaced",
        description="PodGroup (older scheduling.sigs.k8s.io form used by Koordinator) is a group of pods "
        "scheduled all-or-nothing.",
        spec=spec,
        status=status,
        # Deliberately NO shortNames: podgroups.scheduling.x-k8s.io owns "pg"/"pgs", and two CRDs sharing a
        # short name make `kubectl get pg` ambiguous (kubectl silently picks one). Use the full name
        # `podgroups.scheduling.sigs.k8s.io` for this group.
        # *.k8s.io groups are protected: the API server rejects the CRD without this annotation.
        annotations={API_APPROVED: "https://github.com/kubernetes-sigs/scheduler-plugins/pull/52"},
    )


def colocation_profile_crd() -> CRD:
    spec = ".spec"
    return CRD(
        group="config.koordinator.sh",
        kind="ClusterColocationProfile",
        plural="clustercolocationprofiles",
        singular="clustercolocationprofile",
        scope="Cluster",
        description="ClusterColocationProfile turns the pods it selects into colocated pods (QoS class, priority, "
        "scheduler, batch resources) when they are created, so workloads need no editing.",
        spec=colocation_profile_spec(),
        status=empty_obj("Observed state of the profile (no fields; problems are Events on the profile)."),
        short_names=("ccp",),
        categories=("loadline",),
        # What a person checks first: which pods (namespace and pod labels; kubectl prints a map as JSON, and a
        # selector of matchExpressions only shows <none> here) and what they become.
        columns=(
            PrinterColumn(
                "Namespace-Selector", "string", f"{spec}.namespaceSelector.matchLabels",
                "Labels a pod's namespace must have (matchLabels; matchExpressions in the object).",
            ),
            PrinterColumn(
                "Selector", "string", f"{spec}.selector.matchLabels",
                "Labels a pod must have (matchLabels; matchExpressions in the object).",
            ),
            PrinterColumn("QoS", "string", f"{spec}.qosClass", "Koordinator QoS class the pods get."),
            PrinterColumn("Priority-Class", "string", f"{spec}.priorityClassName", "PriorityClass the pods get."),
            PrinterColumn("Scheduler", "string", f"{spec}.schedulerName", "Scheduler the pods are given to."),
            PrinterColumn("Probability", "string", f"{spec}.probability", "Share of the selected pods mutated."),
            AGE,
        ),
    )  # fmt: skip


def all_crds() -> list[CRD]:
    return [
        node_metric_crd(), node_slo_crd(), pod_group_x_k8s_crd(), pod_group_sigs_k8s_crd(), colocation_profile_crd(),
    ]  # fmt: skip
