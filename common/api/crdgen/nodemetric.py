"""Koordinator building blocks (ResourceMap, DeviceInfo) and the NodeMetric schema."""

from __future__ import annotations

from common.api.crdgen.schema import (
    Schema,
    array,
    boolean,
    condition,
    date_time,
    int32,
    integer,
    map_of,
    obj,
    preserved,
    resource_list,
    string,
    string_map,
)

# --------------------------------------------------------------------------------------------------
# Koordinator building blocks (apis/slo/v1alpha1, apis/scheduling/v1alpha1/device_types.go)
# --------------------------------------------------------------------------------------------------


def device_topology() -> Schema:
    return obj(
        {
            "socketID": int32("CPU socket the device belongs to."),
            "nodeID": int32("NUMA node the device belongs to (unique across sockets)."),
            "pcieID": string("PCIe switch the device is connected to (unique across NUMA nodes)."),
            "busID": string("PCI domain:bus:device.function of the device."),
        },
        "Topology of the device.",
        required=["socketID", "nodeID", "pcieID"],
    )


def virtual_function_group() -> Schema:
    vf = obj(
        {
            "minor": int32("Minor number of the virtual function, from 0."),
            "busID": string("PCI domain:bus:device.function of the virtual function."),
        },
        required=["minor"],
    )
    return obj(
        {
            "labels": string_map("Properties of the virtual functions in this group."),
            "vfs": array(vf, "Virtual functions in the group."),
        }
    )


def device_info() -> Schema:
    """scheduling/v1alpha1 DeviceInfo: one GPU/RDMA/FPGA/XPU device and, in NodeMetric, its usage."""
    return obj(
        {
            "type": string("Device type: gpu, fpga, rdma or xpu."),
            "id": string("UUID of the device."),
            "minor": int32("Minor number of the device, from 0."),
            "moduleID": int32("Physical id of the device."),
            "health": boolean("Whether the device is healthy (always serialized).", default=False),
            "labels": string_map("Device properties for selection."),
            "resources": resource_list(
                "Resource quantities of the device; in NodeMetric its usage, e.g. koordinator.sh/gpu-core, "
                "koordinator.sh/gpu-memory, koordinator.sh/gpu-memory-ratio."
            ),
            "topology": device_topology(),
            "vfGroups": array(virtual_function_group(), "Virtual function groups of the device."),
            "conditions": array(condition(), "Health conditions of the device."),
        },
        required=["health"],
    )


def resource_map(description: str | None = None) -> Schema:
    """slo/v1alpha1 ResourceMap: an inlined ResourceList plus per-device usage."""
    return obj(
        {
            "resources": resource_list("Usage per resource name (koordlet writes cpu in milli-cores and memory)."),
            "devices": array(device_info(), "Per-device usage."),
        },
        description,
    )


def aggregated_usages(description: str) -> Schema:
    return array(
        obj(
            {
                "duration": string("Aggregation window as a Go duration, e.g. 5m0s."),
                "usage": map_of(
                    resource_map(),
                    "Usage per aggregation type (avg, p50, p90, p95, p99); an empty map value means the window "
                    "does not have enough samples yet.",
                ),
            }
        ),
        description,
    )


def priority_class(description: str) -> Schema:
    return string(f"{description}: koord-prod, koord-mid, koord-batch, koord-free or empty.")


def qos_class(description: str) -> Schema:
    return string(f"{description}: LSE, LSR, LS, BE, SYSTEM or empty.")


def reclaimable_metric(description: str) -> Schema:
    return obj({"resource": resource_map("Predicted resource amount.")}, description)


# --------------------------------------------------------------------------------------------------
# NodeMetric
# --------------------------------------------------------------------------------------------------


def node_metric_spec() -> Schema:
    return obj(
        {
            "metricCollectPolicy": obj(
                {
                    "aggregateDurationSeconds": integer(
                        "Window in seconds for nodeUsage, systemUsage and podsMetric averages."
                    ),
                    "reportIntervalSeconds": integer("Period in seconds at which the agent reports the status."),
                    "nodeAggregatePolicy": obj(
                        {"durations": array(string(), "Aggregation windows as Go durations, e.g. 5m0s.")},
                        "Windows of the aggregated node usages.",
                    ),
                    "nodeMemoryCollectPolicy": string(
                        "How node memory usage is computed (default usageWithoutPageCache).",
                        enum=["usageWithHotPageCache", "usageWithoutPageCache", "usageWithPageCache"],
                    ),
                },
                "Metric collection policy, set by the manager.",
            )
        },
        "Desired collection policy of the NodeMetric.",
    )


def node_metric_status() -> Schema:
    numa_usage = obj(
        {
            "numaNodeID": int32("NUMA node id."),
            "nodeUsage": resource_map("Total usage of the NUMA node."),
            "systemUsage": resource_map("System (non-pod) usage of the NUMA node."),
        },
        required=["numaNodeID"],
    )
    node_metric = obj(
        {
            "nodeUsage": resource_map("Total resource usage of the node."),
            "aggregatedNodeUsages": aggregated_usages(
                "Aggregated node usage per window, reported only when there are enough samples. "
                "The Loadline agent writes the windows shortest first."
            ),
            "systemUsage": resource_map("Usage of daemons and the kernel: node usage minus pod and host-app usage."),
            "aggregatedSystemUsages": aggregated_usages("Aggregated system usage per window."),
            "numaUsages": array(numa_usage, "Usage per NUMA node."),
        },
        "Metrics of the node.",
    )
    pod_metric = obj(
        {
            "name": string("Pod name."),
            "namespace": string("Pod namespace."),
            "podUsage": resource_map("Resource usage of the pod."),
            "priority": priority_class("Defaulted priority class of the pod"),
            "qos": qos_class("Defaulted QoS class of the pod"),
            "extensions": preserved("Third-party extensions."),
        }
    )
    host_app_metric = obj(
        {
            "name": string("Host application name."),
            "usage": resource_map("Resource usage of the host application."),
            "priority": priority_class("Priority class of the application"),
            "qos": qos_class("QoS class of the application"),
        }
    )
    return obj(
        {
            "updateTime": date_time("When the agent built this status; consumers use it for expiry."),
            "nodeMetric": node_metric,
            "podsMetric": array(pod_metric, "Metrics of the pods on the node, sorted by namespace and name."),
            "hostApplicationMetric": array(host_app_metric, "Metrics of out-of-band host applications."),
            "prodReclaimableMetric": reclaimable_metric("Predicted reclaimable resources of Prod pods."),
            "prodPeakMetric": reclaimable_metric("Predicted peak usage of Prod pods including system usage."),
        },
        "Observed metrics, written by the node agent.",
    )
