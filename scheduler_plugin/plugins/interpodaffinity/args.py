"""InterPodAffinityArgs (kubescheduler.config.k8s.io/v1), with kube-scheduler's defaults and validation."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class InterPodAffinityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)

    # Score weight of an existing pod's required affinity term the incoming pod matches (0 turns it off).
    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100)
    # Skip scoring by existing pods' preferences when the incoming pod has no preferred (anti-)affinity.
    ignore_preferred_terms_of_existing_pods: bool = False
