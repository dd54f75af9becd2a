"""The predictor inside the agent daemon: what it reads (the sample ring, the node's pods, the Node's allocatable)
and what it adds to the NodeMetric status (`prodReclaimableMetric`, `prodPeakMetric`).

    prediction = NodePrediction(predictor, node_name, http, pod_objects=lambda: podwatch.index.objects(node))
    pipeline.prediction = prediction                 # the report fills the two fields
    spawn(prediction.run(lambda: pipeline.sampler.ring))

The Node is read (GET) once per training interval rather than watched: its allocatable rarely changes, and a watch
would deliver every status heartbeat. koordlet writes `prodReclaimableMetric: {resource: {}}` when it cannot
predict (before its first training, or without the node); so does this.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from agent.prediction.predictor import PeakPredictor, PredictorSettings, node_allocatable, predicted_pod
from agent.prediction.reclaimable import PredictedPod, ReclaimResult, Resources
from agent.series import CPU_USAGE_CORES, MEMORY_ANON_USAGE_BYTES, SeriesKey
from agent.store.ring import SampleRing
from common.api.nodemetric import NodeMetricStatus, ReclaimableMetric, ResourceMap
from common.api.quantity import Format, Quantity

if TYPE_CHECKING:
    from agent.config import AgentSettings
    from agent.report import Aggregates
    from common.kube.http import KubeHTTP

log = logging.getLogger("loadline.agent.prediction")


def reclaimable_metric(value: Resources | None) -> ReclaimableMetric:
    """Koordinator's ReclaimableMetric: `{resource: {resources: {cpu: <milli>, memory: <bytes>}}}`, or
    `{resource: {}}` when there is no value."""
    if value is None:
        return ReclaimableMetric(resource=ResourceMap())
    resources = {
        "cpu": Quantity.from_milli(max(value.cpu_milli, 0), Format.DECIMAL_SI),
        "memory": Quantity.from_int(max(value.memory_bytes, 0), Format.BINARY_SI),
    }
    return ReclaimableMetric(resource=ResourceMap(resources=resources))


class NodePrediction:
    def __init__(
        self,
        predictor: PeakPredictor,
        node_name: str,
        http: KubeHTTP | None,
        *,
        pod_objects: Callable[[], Iterable[Mapping[str, Any]]],
        request_timeout_seconds: float = 10.0,
    ) -> None:
        self.predictor = predictor
        self.node_name = node_name
        self.http = http
        self.pod_objects = pod_objects
        self.request_timeout_seconds = request_timeout_seconds
        self.allocatable: Resources | None = None
        self._node_error: str | None = None

    def pods(self) -> list[PredictedPod]:
        out = []
        for obj in self.pod_objects():
            pod = predicted_pod(obj)
            if pod is not None:
                out.append(pod)
        return out

    async def refresh_node(self) -> None:
        """The Node's allocatable, at most once per training; the last one read serves while the API is away."""
        if self.http is None:
            return
        from common.kube.http import KubeError

        try:
            node = await self.http.request(
                "GET", f"/api/v1/nodes/{self.node_name}", timeout_seconds=self.request_timeout_seconds
            )
        except (KubeError, OSError, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            if error != self._node_error:
                log.warning(
                    "node %s not read for the peak prediction (last allocatable kept): %s", self.node_name, error
                )
            self._node_error = error
            return
        self._node_error = None
        allocatable = node_allocatable(node)
        if allocatable is None:
            log.warning("node %s has no readable cpu/memory allocatable: no prodReclaimableMetric", self.node_name)
        self.allocatable = allocatable

    def result(self, agg: Aggregates) -> ReclaimResult:
        """For the pods the report has both usages of (koordlet predicts the pods it reports)."""
        reported = [
            pod
            for pod in self.pods()
            if agg.avg(SeriesKey(CPU_USAGE_CORES, pod.uid)) is not None
            and agg.avg(SeriesKey(MEMORY_ANON_USAGE_BYTES, pod.uid)) is not None
        ]
        return self.predictor.result(reported, self.allocatable)

    def fill(self, status: NodeMetricStatus, agg: Aggregates) -> None:
        result = self.result(agg)
        status.prod_reclaimable_metric = reclaimable_metric(result.reclaimable)
        status.prod_peak_metric = reclaimable_metric(result.peak)

    async def run(self, ring: Callable[[], SampleRing]) -> None:
        started = time.monotonic()
        log.info(
            "peak predictor: training every %gs, cold start %gs, safety margin %d %%, checkpoint %s",
            self.predictor.settings.training_interval_seconds,
            self.predictor.settings.cold_start_seconds,
            self.predictor.settings.safety_margin_percent,
            self.predictor.settings.checkpoint_dir or "off",
        )
        await self.refresh_node()
        try:
            await self.predictor.run(ring, self.pods, self.refresh_node)
        finally:
            log.debug("peak predictor stopped after %.0fs", time.monotonic() - started)


def predictor_settings(settings: AgentSettings) -> PredictorSettings:
    """The `prediction_*` settings of the agent's configuration."""
    return PredictorSettings(
        checkpoint_dir=settings.prediction_checkpoint_dir,
        cold_start_seconds=settings.prediction_cold_start_seconds,
        safety_margin_percent=settings.prediction_safety_margin_percent,
        cpu_half_life_seconds=settings.prediction_cpu_half_life_seconds,
        memory_half_life_seconds=settings.prediction_memory_half_life_seconds,
        training_interval_seconds=settings.prediction_training_interval_seconds,
        model_expiration_seconds=settings.prediction_model_expiration_seconds,
        checkpoint_interval_seconds=settings.prediction_checkpoint_interval_seconds,
        min_history_seconds=settings.prediction_min_history_seconds,
        max_pods=settings.prediction_max_pods,
    )


__all__ = ["NodePrediction", "predictor_settings", "reclaimable_metric"]
