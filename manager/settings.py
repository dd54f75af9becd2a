"""The manager's own settings (flags > LOADLINE_MANAGER_* environment > YAML file > defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PositiveSeconds = Annotated[float, Field(gt=0)]


class ManagerSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kubeconfig: Path | None = None  # None: $KUBECONFIG, ~/.kube/config, then in-cluster
    namespace: str = Field(default="loadline-system", min_length=1)  # of the ConfigMap and the Lease
    config_map: str = Field(default="slo-controller-config", min_length=1)
    lease_name: str = Field(default="loadline-manager", min_length=1)
    leader_elect: bool = True
    lease_duration_seconds: PositiveSeconds = 15
    renew_deadline_seconds: PositiveSeconds = 10
    retry_period_seconds: PositiveSeconds = 2
    # Every node is reconciled at least this often, besides the watch events.
    resync_seconds: PositiveSeconds = 60
    workers: Annotated[int, Field(ge=1, le=64)] = 4
    bind_address: str = "0.0.0.0"
    metrics_port: Annotated[int, Field(ge=0, le=65535)] = 9091  # 0: no HTTP server
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = False

    @model_validator(mode="after")
    def _lease_timings(self) -> ManagerSettings:
        if not self.lease_duration_seconds > self.renew_deadline_seconds > self.retry_period_seconds:
            raise ValueError(
                "need lease_duration_seconds > renew_deadline_seconds > retry_period_seconds, got"
                f" {self.lease_duration_seconds:g} / {self.renew_deadline_seconds:g} / {self.retry_period_seconds:g}"
            )
        return self
