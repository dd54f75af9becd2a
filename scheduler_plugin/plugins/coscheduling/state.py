"""The Coscheduling plugin's per-gang bookkeeping, and when an entry may be forgotten.

Every gang the scheduler sees gets entries keyed by its gang key; with many short-lived
jobs (each gang a new key) a long-running scheduler would keep them all. `prune` drops:

* `backoff_until` / `permitted_until` entries whose time has passed: the plugin treats an
  entry at or before now exactly like no entry (scheduler-plugins keeps both in TTL caches);
* `first_seen` / `last_failure` entries of a gang none of whose pods the scheduler knows
  any more (every member deleted; no pod of it waiting in Permit), once it has been gone
  for `grace_seconds`. While any member exists (pending, waiting, assumed, bound or
  finished but not deleted) both are kept, however old: `first_seen` is the creation time
  that orders the gang in the queue (and the schedule timeout counts from Permit, not
  from it), and `last_failure` moves a failing gang back in the queue. Dropping either for
  a live gang would reorder the queue. Koordinator likewise forgets an annotation gang when
  its last pod is deleted; the grace period covers a gang whose pods are replaced (delete,
  then create under the same gang name) without handing it a new creation time.

`absent_since` remembers when a gang was first found gone; it only ever holds keys of
`first_seen` or `last_failure`, so it is bounded by them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

PRUNE_INTERVAL_SECONDS = 30.0  # at most one sweep per this much clock time
GONE_GRACE_SECONDS = 60.0  # how long a gang without any pod keeps its creation and failure times


@dataclass(slots=True)
class GangState:
    first_seen: dict[str, float] = field(default_factory=dict)  # creation time used for queue order
    backoff_until: dict[str, float] = field(default_factory=dict)  # PostFilter backoff (podGroupBackoffSeconds)
    permitted_until: dict[str, float] = field(default_factory=dict)  # capacity check passed, valid until
    last_failure: dict[str, float] = field(default_factory=dict)  # queue a failing gang by its last failure
    absent_since: dict[str, float] = field(default_factory=dict)  # when a gang was first found without pods

    def size(self) -> int:
        """Entries held, over all maps."""
        return (len(self.first_seen) + len(self.backoff_until) + len(self.permitted_until)
                + len(self.last_failure) + len(self.absent_since))

    def prune(self, now: float, is_live: Callable[[str], bool], grace_seconds: float = GONE_GRACE_SECONDS) -> int:
        """Drop the entries no hook can need any more (module docstring); returns how many went.

        `is_live(key)` says whether the scheduler still knows a pod of the gang; it is called
        once per gang holding a creation or failure time, so it must be cheap (an index lookup)."""
        removed = 0
        for expiring in (self.backoff_until, self.permitted_until):
            expired = [key for key, until in expiring.items() if until <= now]
            for key in expired:
                del expiring[key]
            removed += len(expired)
        absent = self.absent_since
        for key in self.first_seen.keys() | self.last_failure.keys():
            if is_live(key):
                if key in absent:
                    del absent[key]
                continue
            since = absent.setdefault(key, now)
            if now - since >= grace_seconds:
                removed += (self.first_seen.pop(key, None) is not None) + (self.last_failure.pop(key, None) is not None)
                del absent[key]
        for key in [k for k in absent if k not in self.first_seen and k not in self.last_failure]:
            del absent[key]
        return removed
