"""Leaf-group placement for a gang (seed 004), as a pure function.

Given the free room of every InfiniBand leaf group (how many of the gang's pods each can
hold) and the gang size n:
* one group holds all n → use the group with the LEAST room that still fits (the
  tightest fit leaves the big groups whole for later, bigger jobs);
* no single group does → take groups from the MOST room downwards until n are covered
  (fewest groups spanned);
* the cluster cannot hold n → None (the gang stays pending).
Ties go to the group name, so plans are reproducible.
"""

from __future__ import annotations

from collections.abc import Mapping


def plan_leaf_groups(room: Mapping[str, int], n: int) -> dict[str, int] | None:
    """How many of the n pods go to each leaf group, or None when they cannot all be placed."""
    if n <= 0:
        return {}
    usable = {group: free for group, free in room.items() if free > 0}
    if sum(usable.values()) < n:
        return None
    fitting = [(free, group) for group, free in usable.items() if free >= n]
    if fitting:
        _, group = min(fitting)
        return {group: n}
    plan: dict[str, int] = {}
    left = n
    for group, free in sorted(usable.items(), key=lambda item: (-item[1], item[0])):
        take = min(free, left)
        plan[group] = take
        left -= take
        if left == 0:
            break
    return plan
