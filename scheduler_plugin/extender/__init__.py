"""Extender mode: Loadline's Filter and Score plugins behind kube-scheduler's HTTP extender API.

For clusters that keep the stock kube-scheduler. kube-scheduler runs its own plugins first,
then POSTs the pod and the surviving nodes to `<urlPrefix>/filter` and `<urlPrefix>/prioritize`
(wire format: `k8s.io/kube-scheduler/extender/v1`, Go field names — see `wire`). The extender
answers with the same plugin code `loadline scheduler` runs, by default LoadAwareScheduling:
nodes whose measured usage plus estimates would cross the thresholds are filtered out (with
LoadAware's reason, which kube-scheduler puts into its FailedScheduling message), the rest are
scored by estimated free load.

* `nodeCacheCapable: true` — kube-scheduler sends node names only; the extender's own
  list+watch caches (nodes, assigned pods, NodeMetrics: `cache`) supply the objects.
* `nodeCacheCapable: false` — kube-scheduler sends full Node objects; they are echoed back for the
  nodes that pass, and judged on the watched copies (a request never writes into the caches).
* Plugins are chosen and configured with a KubeSchedulerConfiguration (`profiles`), like the
  scheduler's own; a pod whose `schedulerName` names a profile uses it, others the first.
* Scores: each plugin's 0..100 score × its weight, summed, then mapped to the extender's 0..10
  (`wire.scale_scores`): by default min–max over the nodes of the request (best 10, worst 0),
  or `--score-scaling absolute` (total × 10 / maximum). kube-scheduler adds score × weight × 10
  to its own plugins' scores, so the `weight` in its configuration sets how strongly load
  outranks its requests-based spreading (5 makes one level worth 50 points).
* Bursts: after prioritize, the pod is provisionally counted on the node kube-scheduler will most
  likely pick (`assume`) until its binding reaches our pod watch, so the next pods of a burst do
  not all see the same "coldest" node — kube-scheduler schedules the next pod before we could
  learn where the last one went.

Limits — **gang (Coscheduling) and InfiniBand-topology (NetworkTopology) placement need the
full scheduler** (`loadline scheduler`): an extender is consulted one pod at a time, has no
Permit stage to hold a gang until all members fit, and cannot decide for a whole group;
configuring either plugin here is refused at start. Preemption and binding stay with
kube-scheduler (no preempt or bind verb).

Run: `python -m scheduler_plugin.extender --help` (`main.main(argv) -> int`).
"""

from scheduler_plugin.extender.engine import ExtenderEngine
from scheduler_plugin.extender.profiles import extender_frameworks
from scheduler_plugin.extender.server import ExtenderServer
from scheduler_plugin.extender.wire import BadRequest, ExtenderArgs, parse_args, to_extender_score

__all__ = [
    "BadRequest",
    "ExtenderArgs",
    "ExtenderEngine",
    "ExtenderServer",
    "extender_frameworks",
    "parse_args",
    "to_extender_score",
]
