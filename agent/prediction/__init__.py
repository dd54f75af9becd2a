"""Peak prediction (the design's "Recommender"): Koordinator's peak predictor in the agent.

`histogram` (decaying histograms in numpy rows) -> `models` (per pod, priority class, system) -> `reclaimable`
(pure formulas: prodReclaimable, prodPeak) -> `predictor` (training, checkpoint via `checkpoint`) -> `node` (the
daemon's wiring into the NodeMetric report). docs/prediction.md explains the whole and its measurements.
"""
