"""Names Koordinator, scheduler-plugins and Kubernetes put on the wire.

Kept in one place so that a typo cannot make us quietly incompatible with the
components that read the other side's objects.
"""

from typing import Final

# --- API groups -----------------------------------------------------------------
SLO_GROUP: Final = "slo.koordinator.sh"
SLO_VERSION: Final = "v1alpha1"
SLO_API_VERSION: Final = f"{SLO_GROUP}/{SLO_VERSION}"
NODEMETRIC_PLURAL: Final = "nodemetrics"
NODESLO_PLURAL: Final = "nodeslos"

CONFIG_GROUP: Final = "config.koordinator.sh"  # ClusterColocationProfile
CONFIG_VERSION: Final = "v1alpha1"
CONFIG_API_VERSION: Final = f"{CONFIG_GROUP}/{CONFIG_VERSION}"
COLOCATION_PROFILE_KIND: Final = "ClusterColocationProfile"
COLOCATION_PROFILE_PLURAL: Final = "clustercolocationprofiles"

PODGROUP_GROUP: Final = "scheduling.x-k8s.io"  # scheduler-plugins
PODGROUP_GROUP_LEGACY: Final = "scheduling.sigs.k8s.io"  # Koordinator's vendored copy
PODGROUP_VERSION: Final = "v1alpha1"
PODGROUP_PLURAL: Final = "podgroups"

# --- priority and QoS (Koordinator apis/extension) ------------------------------
LABEL_PRIORITY_CLASS: Final = "koordinator.sh/priority-class"
LABEL_SUB_PRIORITY: Final = "koordinator.sh/priority"
LABEL_QOS_CLASS: Final = "koordinator.sh/qosClass"

# --- extended resources ---------------------------------------------------------
RESOURCE_CPU: Final = "cpu"
RESOURCE_MEMORY: Final = "memory"
RESOURCE_PODS: Final = "pods"
BATCH_CPU: Final = "kubernetes.io/batch-cpu"  # integer milli-cores
BATCH_MEMORY: Final = "kubernetes.io/batch-memory"  # bytes
MID_CPU: Final = "kubernetes.io/mid-cpu"
MID_MEMORY: Final = "kubernetes.io/mid-memory"
GPU_CORE: Final = "koordinator.sh/gpu-core"
GPU_MEMORY: Final = "koordinator.sh/gpu-memory"
GPU_MEMORY_RATIO: Final = "koordinator.sh/gpu-memory-ratio"

# --- node annotations and labels ------------------------------------------------
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"  # v1.LabelHostname (kube-scheduler's default spreading)
LABEL_TOPOLOGY_ZONE: Final = "topology.kubernetes.io/zone"  # v1.LabelTopologyZone
ANNOTATION_NODE_RESERVATION: Final = "node.koordinator.sh/reservation"
ANNOTATION_RAW_ALLOCATABLE: Final = "node.koordinator.sh/raw-allocatable"
# Koordinator's scheduler records the CPUs it bound an LSE/LSR pod to here: {"cpuset": "0-3"}.
ANNOTATION_RESOURCE_STATUS: Final = "scheduling.koordinator.sh/resource-status"
ANNOTATION_COLOCATION_STRATEGY: Final = "node.koordinator.sh/colocation-strategy"
ANNOTATION_USAGE_THRESHOLDS: Final = "scheduling.koordinator.sh/usage-thresholds"
LABEL_CPU_RECLAIM_RATIO: Final = "node.koordinator.sh/cpu-reclaim-ratio"
LABEL_MEMORY_RECLAIM_RATIO: Final = "node.koordinator.sh/memory-reclaim-ratio"
LABEL_MID_STATIC_CPU_RESERVED_RATIO: Final = "node.koordinator.sh/mid-static-cpu-reserved-ratio"
LABEL_MID_STATIC_MEMORY_RESERVED_RATIO: Final = "node.koordinator.sh/mid-static-memory-reserved-ratio"

# --- pod annotations ------------------------------------------------------------
ANNOTATION_POD_DELETION_COST: Final = "controller.kubernetes.io/pod-deletion-cost"
ANNOTATION_EVICTION_COST: Final = "scheduling.koordinator.sh/eviction-cost"
ANNOTATION_MIRROR_POD: Final = "kubernetes.io/config.mirror"
ANNOTATION_DESCHEDULER_EVICT: Final = "descheduler.alpha.kubernetes.io/evict"
# batch-cpu/batch-memory of each container as JSON, for runtime hooks that see no pod spec (Koordinator
# apis/extension/resource.go AnnotationExtendedResourceSpec); written by the pod mutating webhook.
ANNOTATION_EXTENDED_RESOURCE_SPEC: Final = "node.koordinator.sh/extended-resource-spec"
# Loadline's: the ClusterColocationProfiles that mutated the pod at creation, comma-separated in the order applied.
ANNOTATION_COLOCATION_PROFILE: Final = "loadline.io/colocation-profile"

# --- ClusterColocationProfile annotations (Koordinator apis/extension/cluster_colocation_profile.go) -----------
ANNOTATION_SKIP_UPDATE_RESOURCES: Final = "config.koordinator.sh/skip-update-resources"

# --- gangs (seeds 000/001, scheduler-plugins, Koordinator apis/extension/coscheduling.go)
LABEL_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"  # scheduler-plugins PodGroup CRD membership
LABEL_POD_GROUP_LEGACY: Final = "pod-group.scheduling.sigs.k8s.io"  # Koordinator PodGroup CRD membership
LABEL_LIGHTWEIGHT_GANG_NAME: Final = "pod-group.scheduling.sigs.k8s.io/name"  # label-only gang (KEP 2)
LABEL_LIGHTWEIGHT_GANG_MIN_AVAILABLE: Final = "pod-group.scheduling.sigs.k8s.io/min-available"
GANG_ANNOTATION_PREFIX: Final = "gang.scheduling.koordinator.sh/"
ANNOTATION_GANG_NAME: Final = GANG_ANNOTATION_PREFIX + "name"
ANNOTATION_GANG_MIN_AVAILABLE: Final = GANG_ANNOTATION_PREFIX + "min-available"
ANNOTATION_GANG_TOTAL_NUMBER: Final = GANG_ANNOTATION_PREFIX + "total-number"
ANNOTATION_GANG_WAITING_TIME: Final = GANG_ANNOTATION_PREFIX + "waiting-time"
ANNOTATION_GANG_MODE: Final = GANG_ANNOTATION_PREFIX + "mode"
ANNOTATION_GANG_GROUPS: Final = GANG_ANNOTATION_PREFIX + "groups"
ANNOTATION_GANG_MATCH_POLICY: Final = GANG_ANNOTATION_PREFIX + "match-policy"
ANNOTATION_GANG_TIMEOUT: Final = GANG_ANNOTATION_PREFIX + "timeout"

# --- kwok ----------------------------------------------------------------------
ANNOTATION_KWOK_NODE: Final = "kwok.x-k8s.io/node"
