"""Prometheus metrics of the peak predictor (`loadline_agent_prediction_*`, `loadline_agent_prod_*`); imported only
by an agent that predicts (a standalone agent never loads prometheus_client)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

MODELS = Gauge("loadline_agent_prediction_models", "Peak-predictor models held (pods and node items)")
MODEL_BYTES = Gauge("loadline_agent_prediction_model_bytes", "Memory of the models' histograms")
REFUSED = Counter(
    "loadline_agent_prediction_refused_pods_total", "Pods left without a model: the max-pods bound was full"
)
RESETS = Counter(
    "loadline_agent_prediction_resets_total",
    "Model resets and re-anchorings, by reason (checkpoint_unusable, clock_jump)",
    ["reason"],
)
DROPPED = Counter(
    "loadline_agent_prediction_dropped_samples_total", "Training samples dropped (not finite or negative)"
)
TRAINING_SECONDS = Gauge("loadline_agent_prediction_training_seconds", "Duration of the last training")
CHECKPOINTS = Counter("loadline_agent_prediction_checkpoint_writes_total", "Checkpoint writes, by result", ["result"])
RECLAIMABLE = Gauge(
    "loadline_agent_prod_reclaimable", "prodReclaimableMetric last reported (cores, bytes)", ["resource"]
)
PEAK = Gauge("loadline_agent_prod_peak", "prodPeakMetric last reported (cores, bytes)", ["resource"])
for _reason in ("checkpoint_unusable", "clock_jump"):
    RESETS.labels(_reason)
for _result in ("ok", "failed"):
    CHECKPOINTS.labels(_result)
