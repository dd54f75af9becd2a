"""The manager's own settings (flags > LOADLINE_MANAGER_* environment > YAML file > defaults)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PositiveSeconds = Annotated[float, Field(gt=0)]
# Settings renamed so that every component spells a meaning the same way (common/flags.py): the old YAML key and
# LOADLINE_MANAGER_* variable still work, with a warning.
RENAMED = {"metrics_port": "port"}


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
    port: Annotated[int, Field(ge=0, le=65535)] = 9091  # /healthz /readyz /metrics; 0: any free port (logged)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_json: bool = False
    # --- the admission webhooks (Colocation Profile), served by every replica: manager/admission/ ---------
    webhook_port: Annotated[int, Field(ge=0, le=65535)] = 0  # HTTPS port; 0: no webhooks
    webhook_only: bool = False  # serve the webhooks only: no node reconciling, the Lease only for profile Events
    # self-signed: the manager makes its CA and serving certificate into the Secret and writes the CA bundle into its
    # webhook configurations; external: another issuer (cert-manager) does both, the manager serves the Secret's.
    webhook_certs: Literal["self-signed", "external"] = "self-signed"
    webhook_secret: str = Field(default="loadline-webhook-certs", min_length=1)
    webhook_configuration: str = Field(default="loadline", min_length=1)  # both the Mutating and the Validating one
    webhook_service: str = Field(default="loadline-webhook", min_length=1)  # <service>.<namespace>.svc is certified
    webhook_hosts: list[str] = Field(default_factory=list)  # more names or IPs to certify (e.g. for a url: webhook)
    webhook_cert_validity_seconds: Annotated[float, Field(ge=15)] = 365 * 86400.0
    webhook_ca_validity_seconds: Annotated[float, Field(ge=15)] = 10 * 365 * 86400.0
    # Pods of these namespaces and of the manager's own are never changed (also if a configuration sends them).
    webhook_skip_namespaces: list[str] = Field(default_factory=lambda: ["kube-system"])

    @field_validator("webhook_hosts", "webhook_skip_namespaces", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        # an environment variable holds a list as "a,b"
        return [part.strip() for part in value.split(",") if part.strip()] if isinstance(value, str) else value

    def webhook_names(self) -> tuple[str, ...]:
        """What the serving certificate certifies: the Service's names, then `webhook_hosts`."""
        service = f"{self.webhook_service}.{self.namespace}.svc"
        return tuple(dict.fromkeys([service, f"{service}.cluster.local", *self.webhook_hosts]))

    @model_validator(mode="after")
    def _lease_timings(self) -> ManagerSettings:
        if not self.lease_duration_seconds > self.renew_deadline_seconds > self.retry_period_seconds:
            raise ValueError(
                "need lease_duration_seconds > renew_deadline_seconds > retry_period_seconds, got"
                f" {self.lease_duration_seconds:g} / {self.renew_deadline_seconds:g} / {self.retry_period_seconds:g}"
            )
        return self
