"""API write failures, logged once per state change instead of once per pod.

When the API server goes away, every binding, event and status patch fails; with
hundreds of pending pods retrying that would be hundreds of log lines every backoff
period. Each kind of call logs its first failure (and a change of failure), counts the
rest in `loadline_scheduler_api_errors_total`, and logs once when it works again.
"""

from __future__ import annotations

import logging

from common.kube.http import KubeError
from scheduler_plugin.server.metrics import API_ERRORS

log = logging.getLogger("loadline.scheduler.api")


def is_health_problem(exc: KubeError) -> bool:
    """Unreachable, overloaded, forbidden or failing — as opposed to a per-object answer (404, 409, 422)."""
    return exc.status == 0 or exc.status >= 500 or exc.status in (401, 403, 429)


class ApiHealth:
    def __init__(self) -> None:
        self._failing: dict[str, int] = {}  # call -> HTTP status of the failure last logged (0: unreachable)

    def failed(self, call: str, exc: KubeError) -> None:
        API_ERRORS.labels(call).inc()
        if self._failing.get(call) != exc.status:
            self._failing[call] = exc.status
            log.warning("%s failing: %s (repeats are counted in loadline_scheduler_api_errors_total{call=%r})",
                        call, exc, call)

    def succeeded(self, call: str) -> None:
        if self._failing.pop(call, None) is not None:
            log.info("%s working again", call)

    @property
    def unreachable(self) -> bool:
        return 0 in self._failing.values()
