"""API objects in the exact shapes Koordinator and scheduler-plugins store (shared by unit and integration tests)."""

# A NodeMetric as koordlet v1.8.0 stores it (koordinator apis/slo/v1alpha1/nodemetric_types.go; main-only fields too)
KOORDINATOR_NODEMETRIC = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeMetric
metadata:
  name: node-a
spec:
  metricCollectPolicy:
    aggregateDurationSeconds: 300
    reportIntervalSeconds: 60
    nodeAggregatePolicy:
      durations: ["5m0s", "10m0s", "30m0s"]
    nodeMemoryCollectPolicy: usageWithoutPageCache
status:
  updateTime: "2026-07-24T06:52:45Z"
  nodeMetric:
    nodeUsage:
      resources: {cpu: 3512m, memory: 20498764Ki}
    aggregatedNodeUsages:
    - duration: 5m0s
      usage:
        avg: {resources: {cpu: 3490m, memory: 20480Mi}}
        p50: {resources: {cpu: 3400m, memory: 20400Mi}}
        p90: {resources: {cpu: 4100m, memory: 20600Mi}}
        p95: {resources: {cpu: 4300m, memory: 20610Mi}}
        p99: {resources: {cpu: 5200m, memory: 20650Mi}}
    - duration: 30m0s
      usage: {avg: {}, p50: {}, p90: {}, p95: {}, p99: {}}
    systemUsage:
      resources: {cpu: 412m, memory: 3Gi}
    aggregatedSystemUsages:
    - duration: 5m0s
      usage:
        avg: {resources: {cpu: 400m, memory: 3Gi}}
        p50: {resources: {cpu: 390m, memory: 3Gi}}
        p90: {resources: {cpu: 450m, memory: 3Gi}}
        p95: {resources: {cpu: 480m, memory: 3Gi}}
        p99: {resources: {cpu: 520m, memory: 3Gi}}
    - duration: 30m0s
      usage: {avg: {}, p50: {}, p90: {}, p95: {}, p99: {}}
    numaUsages:
    - numaNodeID: 0
      nodeUsage: {resources: {cpu: 1800m, memory: 10Gi}}
      systemUsage: {resources: {cpu: 200m, memory: 1Gi}}
  podsMetric:
  - namespace: default
    name: web-7d9f
    priority: koord-prod
    qos: LS
    podUsage:
      resources: {cpu: 120m, memory: 100Mi}
      devices:
      - {type: gpu, id: GPU-8c1e..., minor: 0, health: false,
         resources: {koordinator.sh/gpu-core: "35", koordinator.sh/gpu-memory: 4Gi,
                     koordinator.sh/gpu-memory-ratio: "25"}}
  hostApplicationMetric:
  - {name: nginx, priority: koord-prod, qos: LS, usage: {resources: {cpu: 50m, memory: 64Mi}}}
  prodReclaimableMetric:
    resource: {resources: {cpu: 6200m, memory: 12Gi}}
  prodPeakMetric:
    resource: {resources: {cpu: 9800m, memory: 40Gi}}
"""

NODESLO = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata: {name: node-a}
spec:
  resourceUsedThresholdWithBE:
    enable: true
    cpuSuppressThresholdPercent: 60
    cpuSuppressPolicy: cfsQuota
    memoryEvictThresholdPercent: 80
    cpuEvictBESatisfactionUpperPercent: 80
    cpuEvictBESatisfactionLowerPercent: 40
  resourceQOSStrategy:
    policies: {cpuPolicy: coreSched}
    beClass: {cpuQOS: {enable: true, groupIdentity: -1}}
  cpuBurstStrategy: {policy: auto, cpuBurstPercent: 1000}
  systemStrategy: {minFreeKbytesFactor: 100}
  hostApplications:
  - name: nginx
    priority: koord-prod
    qos: LS
    cgroupPath: {base: CgroupRoot, parentDir: host-latency-sensitive/, relativePath: nginx/}
  extensions: {vendor: {x: 1}}
"""

PODGROUPS = [
    """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: tf-smoke-gpu, namespace: default}
spec: {minMember: 4, minResources: {cpu: "8", memory: 16Gi}, scheduleTimeoutSeconds: 30}
status: {phase: Scheduling, running: 1, succeeded: 0, failed: 0, occupiedBy: default/job-a, scheduleStartTime: "2026-07-24T06:52:45Z"}
""",
    """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata: {name: tf-smoke-gpu, namespace: default}
spec: {minMember: 2, scheduleTimeoutSeconds: 60}
status: {phase: PreScheduling, scheduled: 1, running: 0}
""",
]

# A NodeSLO as Koordinator's slo-controller writes it with the page-cache QoS of Anolis OS turned on
# (field names and types from Koordinator's NodeSLO CRD). Its CRD has no enum on the two policies,
# so a newer policy name (here a made-up one) must be accepted as well.
KOORDINATOR_NODESLO = """
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata: {name: node-a}
spec:
  resourceUsedThresholdWithBE:
    enable: true
    cpuSuppressThresholdPercent: 65
    cpuSuppressMinPercent: 10
    cpuSuppressPolicy: cpuIdleSuppress
    cpuEvictPolicy: evictByNodeUsage
    cpuEvictTimeWindowSeconds: 300
    memoryEvictThresholdPercent: 70
    memoryEvictLowerPercent: 68
  resourceQOSStrategy:
    lsrClass:
      memoryQOS: {enable: true, wmarkRatio: 95, pageCacheLimitEnable: 1, pageCacheLimitSize: 1073741824,
                  pageCacheLimitSync: 0}
    lsClass:
      memoryQOS: {enable: true, pageCacheLimitEnable: 1, pageCacheLimitSize: 536870912, pageCacheLimitSync: 1}
    beClass:
      cpuQOS: {enable: true, groupIdentity: -1}
      memoryQOS: {enable: true, wmarkMinAdj: 50, pageCacheLimitEnable: 1, pageCacheLimitSize: 268435456,
                  pageCacheLimitSync: 1}
    systemClass:
      memoryQOS: {pageCacheLimitEnable: 0}
    cgroupRoot:
      memoryQOS: {pageCacheLimitEnable: 1, pageCacheLimitSize: 0, pageCacheLimitSync: 0}
  systemStrategy: {minFreeKbytesFactor: 100, watermarkScaleFactor: 150, memcgReapBackGround: 0,
                   pageCacheLimitEnabled: 1}
"""
