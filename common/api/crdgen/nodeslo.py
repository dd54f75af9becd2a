"""The NodeSLO strategies common/api/nodeslo.py carries verbatim (apis/slo/v1alpha1/nodeslo_types.go); the rest
of the NodeSLO schema is generated from that model (from_model.py)."""

from __future__ import annotations

from common.api.crdgen.schema import (
    Schema,
    _described,
    array,
    boolean,
    int_or_string,
    integer,
    map_of,
    obj,
    quantity,
    string,
)

# --------------------------------------------------------------------------------------------------
# NodeSLO
# --------------------------------------------------------------------------------------------------


def resource_qos() -> Schema:
    io_cfg = obj(
        {
            "readIOPS": integer("Read IOPS limit; 0 disables.", minimum=0),
            "writeIOPS": integer("Write IOPS limit; 0 disables.", minimum=0),
            "readBPS": integer("Read bytes/s limit; 0 disables.", minimum=0),
            "writeBPS": integer("Write bytes/s limit; 0 disables.", minimum=0),
            "ioWeightPercent": integer("Weight of the group (1-100, default 100).", minimum=1, maximum=100),
            "readLatency": integer("blk-iocost read latency threshold in microseconds (root class only)."),
            "writeLatency": integer("blk-iocost write latency threshold in microseconds (root class only)."),
            "readLatencyPercent": integer("blk-iocost read latency percentile.", minimum=0, maximum=100),
            "writeLatencyPercent": integer("blk-iocost write latency percentile.", minimum=0, maximum=100),
            "enableUserModel": boolean("Use the user-defined blk-iocost cost model (default false)."),
            "modelReadBPS": integer("Cost model read bytes/s.", minimum=1),
            "modelWriteBPS": integer("Cost model write bytes/s.", minimum=1),
            "modelReadSeqIOPS": integer("Cost model sequential read IOPS.", minimum=1),
            "modelWriteSeqIOPS": integer("Cost model sequential write IOPS.", minimum=1),
            "modelReadRandIOPS": integer("Cost model random read IOPS.", minimum=1),
            "modelWriteRandIOPS": integer("Cost model random write IOPS.", minimum=1),
        }
    )
    block = obj(
        {
            "name": string("Block device, volume group or volume name."),
            "type": string("Block type: device, volumegroup or podvolume."),
            "ioCfg": io_cfg,
        }
    )
    bandwidth = "int = % of total bandwidth (0-100), string = bytes/s such as 50M"
    return obj(
        {
            "cpuQOS": obj(
                {
                    "enable": boolean("Whether CPU QoS is enabled."),
                    "groupIdentity": integer("Group identity value (cpuPolicy groupIdentity)."),
                    "schedIdle": integer("cpu.idle value; 1 = SCHED_IDLE (cpuPolicy coreSched)."),
                    "coreExpeller": boolean("Whether the class can expel idle pods at SMT level (coreSched)."),
                },
                "Node-level CPU QoS.",
            ),
            "memoryQOS": obj(
                {
                    "enable": boolean("Whether memory QoS is enabled (default false)."),
                    "minLimitPercent": integer("memory.min as % of the memory request.", minimum=0),
                    "lowLimitPercent": integer("memory.low as % of the memory request.", minimum=0),
                    "throttlingPercent": integer("memory.high factor in %.", minimum=0),
                    "wmarkRatio": integer("memory.wmark_ratio (Anolis OS).", minimum=0, maximum=100),
                    "wmarkScalePermill": integer("memory.wmark_scale_factor (Anolis OS).", minimum=1, maximum=1000),
                    "wmarkMinAdj": integer("memory.wmark_min_adj (Anolis OS).", minimum=-25, maximum=50),
                    "priorityEnable": integer("Enable memcg OOM priority."),
                    "priority": integer("memcg OOM priority."),
                    "oomKillGroup": integer("memcg OOM kill group."),
                    "pageCacheLimitEnable": integer("memory.pagecache_limit.enable, 0 or 1 (Anolis OS)."),
                    "pageCacheLimitSize": integer("memory.pagecache_limit.size in bytes (Anolis OS)."),
                    "pageCacheLimitSync": integer(
                        "memory.pagecache_limit.sync: 1 = reclaim synchronously over the limit (Anolis OS)."
                    ),
                },
                "Node-level memory QoS.",
            ),
            "blkioQOS": obj(
                {"enable": boolean("Whether block IO QoS is enabled."), "blocks": array(block, "Per-block IO config.")},
                "Block IO QoS.",
            ),
            "resctrlQOS": obj(
                {
                    "enable": boolean("Whether resctrl QoS is enabled."),
                    "catRangeStartPercent": integer("LLC range start in %.", minimum=0, maximum=100),
                    "catRangeEndPercent": integer("LLC range end in %.", minimum=0, maximum=100),
                    "mbaPercent": integer("Memory bandwidth allocation in %.", minimum=0, maximum=100),
                },
                "Node-level resctrl (LLC/MBA) QoS.",
            ),
            "networkQOS": obj(
                {
                    "enable": boolean("Whether network QoS is enabled."),
                    "ingressRequest": int_or_string(f"Guaranteed ingress bandwidth; {bandwidth}.", default=0),
                    "ingressLimit": int_or_string(f"Maximum ingress bandwidth; {bandwidth}.", default=100),
                    "egressRequest": int_or_string(f"Guaranteed egress bandwidth; {bandwidth}.", default=0),
                    "egressLimit": int_or_string(f"Maximum egress bandwidth; {bandwidth}.", default=100),
                },
                "Network QoS.",
            ),
        }
    )


def resource_qos_strategy() -> Schema:
    def cls(description: str) -> Schema:
        return _described(resource_qos(), description)

    return obj(
        {
            "policies": obj(
                {
                    "cpuPolicy": string("CPU QoS policy: groupIdentity (default) or coreSched."),
                    "netQOSPolicy": string("Network QoS policy: tc (default) or terway-qos."),
                },
                "Policies of pod QoS.",
            ),
            "lsrClass": cls("QoS of LSR pods."),
            "lsClass": cls("QoS of LS pods."),
            "beClass": cls("QoS of BE pods."),
            "systemClass": cls("QoS of SYSTEM pods."),
            "cgroupRoot": cls("QoS of the root cgroup."),
        },
        "QoS configuration per QoS class.",
    )


def cpu_burst_strategy() -> Schema:
    return obj(
        {
            "policy": string("none, cpuBurstOnly, cfsQuotaBurstOnly or auto."),
            "cpuBurstPercent": integer(
                "cpu.cfs_burst_us (v1) / cpu.max.burst (v2) in % of the limit (default 1000).",
                minimum=0,
                maximum=10000,
            ),
            "cfsQuotaBurstPercent": integer("Ceiling of the CFS quota scale-up in % (default 300)."),
            "cfsQuotaBurstPeriodSeconds": integer("How long a pod may burst, -1 = unlimited (default)."),
            "sharePoolThresholdPercent": integer("Scale CFS quota down above this node CPU usage % (default 50)."),
        },
        "CPU burst strategy.",
    )


def system_strategy() -> Schema:
    return obj(
        {
            "minFreeKbytesFactor": integer("vm.min_free_kbytes = factor * total memory / 10000."),
            "watermarkScaleFactor": integer("vm.watermark_scale_factor."),
            "memcgReapBackGround": integer("/sys/kernel/mm/memcg_reaper/reap_background."),
            "pageCacheLimitEnabled": integer("/sys/kernel/mm/pagecache_limit/enabled (Anolis OS)."),
            "schedGroupIdentityEnabled": integer("kernel.sched_group_identity_enabled (0 or 1)."),
            "schedIdleSaverWmark": integer("kernel.sched_idle_saver_wmark in ns."),
            "schedFeatures": map_of(boolean(), "Extra /sys/kernel/sched_features flags."),
            "totalNetworkBandwidth": quantity("Total network bandwidth of the node in Mbps."),
        },
        "Node-wide kernel settings.",
    )
