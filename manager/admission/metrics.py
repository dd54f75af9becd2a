"""Prometheus metrics of the admission webhooks (`loadline_webhook_*`), on the manager's /metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

WEBHOOKS = ("mutate-pod", "validate-pod", "validate-profile")

# One count per profile a pod matched (profile = its name) with what became of it (applied, skipped_*), or one per
# request with profile "" (not_matched, skipped_namespace, ignored, allowed, refused, bad_request, error, not_ready).
ADMISSIONS = Counter(
    "loadline_webhook_admissions_total",
    "Admission requests by webhook, ClusterColocationProfile (\"\" when none applies) and outcome",
    ["webhook", "profile", "outcome"],
)
DURATION = Histogram(
    "loadline_webhook_admission_duration_seconds",
    "Time to answer an admission request, from its body read to its answer, by webhook",
    ["webhook"],
    buckets=(0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5),
)
PROFILES = Gauge("loadline_webhook_profiles", "ClusterColocationProfiles by state (valid, invalid)", ["state"])
CERT_EXPIRY = Gauge(
    "loadline_webhook_certificate_expiry_timestamp_seconds",
    "notAfter of the webhook's certificates (serving; ca: the newest CA of the bundle)",
    ["certificate"],
)
CERT_ROTATIONS = Counter(
    "loadline_webhook_certificate_renewals_total", "Certificates this replica issued (serving, ca)", ["certificate"]
)
CERT_ERRORS = Counter(
    "loadline_webhook_certificate_errors_total",
    "Failed steps of keeping the webhook's certificates (secret, configuration, serving)",
    ["step"],
)

for _webhook in WEBHOOKS:
    DURATION.labels(_webhook)
    for _outcome in ("bad_request", "error"):
        ADMISSIONS.labels(_webhook, "", _outcome)
for _state in ("valid", "invalid"):
    PROFILES.labels(_state)
for _certificate in ("serving", "ca"):
    CERT_ROTATIONS.labels(_certificate)
