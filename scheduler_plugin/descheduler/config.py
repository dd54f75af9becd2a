"""The descheduler's ``--config`` file: a LowNodeLoadArgs document, or Koordinator's whole
DeschedulerConfiguration (``koord-descheduler-config``) from which the LowNodeLoad and
MigrationController plugin args are taken.

Errors name the offending field by its path in the file, e.g.
``profiles[0].pluginConfig[1].args.highThresholds.cpu: 120 must be a percentage between 0 and 100``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from scheduler_plugin.descheduler.args import ArgsError, LowNodeLoadArgs, parse_args

DESCHEDULER_CONFIGURATION = "DeschedulerConfiguration"
LOW_NODE_LOAD = "LowNodeLoad"
MIGRATION_CONTROLLER = "MigrationController"

# DeschedulerConfiguration top-level fields that map onto LowNodeLoadArgs.
_TOP_LEVEL_FIELDS = ("deschedulingInterval", "dryRun")
# The MigrationControllerArgs limits Loadline applies itself; its other fields (PodMigrationJob
# modes, reservations, arbitration) have no meaning for direct evictions and are ignored.
_MIGRATION_FIELDS = (
    "maxMigratingPerNode",
    "maxMigratingPerNamespace",
    "maxMigratingGlobally",
    "maxUnavailablePerWorkload",
    "evictQPS",
    "evictBurst",
    "evictLocalStoragePods",
)
_FIELD_HEAD = re.compile(r"^([A-Za-z0-9]+)")


def load_args_file(path: str | Path) -> LowNodeLoadArgs:
    """Read and validate the file; raises ArgsError whose problems name each bad field."""
    file = Path(path)
    try:
        document = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise ArgsError([f"{file}: cannot read: {exc.strerror or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ArgsError([f"{file}: not valid YAML: {exc}"]) from None
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ArgsError([f"{file}: must hold a mapping (LowNodeLoadArgs or DeschedulerConfiguration)"])
    return args_from_document(document)


def args_from_document(document: Mapping[str, Any]) -> LowNodeLoadArgs:
    if document.get("kind") != DESCHEDULER_CONFIGURATION:
        return parse_args(document)
    data, origin, low_prefix = _flatten_descheduler_configuration(document)
    try:
        return parse_args(data)
    except ArgsError as exc:
        raise ArgsError([_relocate(problem, origin, low_prefix) for problem in exc.problems]) from None


def _flatten_descheduler_configuration(
    document: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, str], str]:
    """LowNodeLoadArgs data; per field, the path prefix it came from in the file; the LowNodeLoad args' prefix."""
    profiles = document.get("profiles")
    if not isinstance(profiles, list):
        raise ArgsError(["profiles: must be a list of profiles with a LowNodeLoad pluginConfig"])
    found: dict[str, list[tuple[str, Mapping[str, Any]]]] = {LOW_NODE_LOAD: [], MIGRATION_CONTROLLER: []}
    for i, profile in enumerate(profiles):
        configs = profile.get("pluginConfig") if isinstance(profile, Mapping) else None
        if configs is None:
            continue
        if not isinstance(configs, list):
            raise ArgsError([f"profiles[{i}].pluginConfig: must be a list"])
        for j, config in enumerate(configs):
            name = config.get("name") if isinstance(config, Mapping) else None
            if name not in found:
                continue
            where = f"profiles[{i}].pluginConfig[{j}].args"
            args = config.get("args", {})
            if not isinstance(args, Mapping):
                raise ArgsError([f"{where}: must be a mapping"])
            found[str(name)].append((where, args))
    lows = found[LOW_NODE_LOAD]
    if not lows:
        raise ArgsError(["profiles: no pluginConfig named LowNodeLoad"])
    if len(lows) > 1:
        raise ArgsError([f"{lows[1][0]}: a second LowNodeLoad pluginConfig; Loadline runs exactly one"])
    where, low_args = lows[0]
    data: dict[str, Any] = {k: v for k, v in low_args.items() if k not in ("apiVersion", "kind")}
    origin = dict.fromkeys(data, where + ".")
    for migration_where, migration_args in found[MIGRATION_CONTROLLER][:1]:
        for key in _MIGRATION_FIELDS:
            # The LowNodeLoad args win when both set a limit (Loadline's own documents put them there).
            if key in migration_args and key not in data:
                data[key] = migration_args[key]
                origin[key] = migration_where + "."
    for key in _TOP_LEVEL_FIELDS:
        if key in document and key not in data:
            data[key] = document[key]
            origin[key] = ""
    return data, origin, where + "."


def _relocate(problem: str, origin: Mapping[str, str], default_prefix: str) -> str:
    match = _FIELD_HEAD.match(problem)
    if match is None:
        return default_prefix + problem
    # A field the file did not set (e.g. "highThresholds: no thresholds configured") belongs to
    # the LowNodeLoad args.
    return origin.get(match.group(1), default_prefix) + problem
