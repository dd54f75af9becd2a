"""Profiles: read a KubeSchedulerConfiguration and build one `Framework` per profile.

Plugin sets are merged with the defaults and multiPoint is expanded the way
kube-scheduler does it (config/v1 `mergePluginSet`, runtime `expandMultiPointPlugins`):
* a default plugin the user re-lists keeps its place with the user's weight;
  `disabled: [{name: "*"}]` drops all defaults of that point;
* a multiPoint plugin lands on every point it implements, unless disabled there;
  order per point = plugins the user also listed explicitly, then multiPoint ones,
  then the remaining explicit ones.
Every error names the offending field, e.g. `profiles[0].plugins.filter.enabled[1].name`.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from common.config import ConfigError
from scheduler_plugin.framework.clock import Clock
from scheduler_plugin.framework.config import POINT_FIELDS, KubeSchedulerConfiguration, PluginRef, Plugins, PluginSet
from scheduler_plugin.framework.interfaces import EXTENSION_POINTS, Binder, ObjectAPI, Plugin
from scheduler_plugin.framework.registry import Registry
from scheduler_plugin.framework.runtime import Framework
from scheduler_plugin.framework.snapshot import Snapshot

_ARGS_META_KEYS = ("apiVersion", "kind")  # pluginConfig args may carry their own type header


def _invalid(detail: str) -> ConfigError:
    return ConfigError(f"invalid scheduler configuration: {detail}")


def field_path(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _validation_error(exc: ValidationError, prefix: Sequence[int | str] = ()) -> ConfigError:
    lines = []
    for error in exc.errors():
        path = field_path([*prefix, *error["loc"]]) or "(root)"
        lines.append(f"{path}: {error['msg']}")
    return _invalid("; ".join(lines))


def load_scheduler_config(source: str | Path | Mapping[str, Any]) -> KubeSchedulerConfiguration:
    """Parse a KubeSchedulerConfiguration from a file (Path), YAML text (str) or an already loaded dict."""
    if isinstance(source, Mapping):
        data: Any = source
    else:
        text = source.read_text() if isinstance(source, Path) else source
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise _invalid(f"not YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise _invalid("(root): expected a mapping")
    try:
        return KubeSchedulerConfiguration.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from None


def merge_plugin_set(default: PluginSet, custom: PluginSet) -> PluginSet:
    """config/v1 mergePluginSet: the user's set applied over the defaults."""
    disabled = [PluginRef(name=p.name) for p in custom.disabled] + [PluginRef(name=p.name) for p in default.disabled]
    disabled_names = {p.name for p in disabled}
    custom_by_name = {p.name: (i, p) for i, p in enumerate(custom.enabled)}
    replaced: set[int] = set()
    enabled: list[PluginRef] = []
    if "*" not in disabled_names:
        for default_ref in default.enabled:
            if default_ref.name in disabled_names:
                continue
            if default_ref.name in custom_by_name:
                # Re-listed by the user: keeps the default's position with the user's settings.
                index, override = custom_by_name[default_ref.name]
                replaced.add(index)
                enabled.append(override)
            else:
                enabled.append(default_ref)
    enabled += [p for i, p in enumerate(custom.enabled) if i not in replaced]
    return PluginSet(enabled=enabled, disabled=disabled)


def merge_plugins(default: Plugins, custom: Plugins) -> Plugins:
    names = [*POINT_FIELDS.values(), "multi_point"]
    return Plugins(**{f: merge_plugin_set(getattr(default, f), getattr(custom, f)) for f in names})


def build_frameworks(
    config: KubeSchedulerConfiguration,
    registry: Registry,
    default_plugins: Plugins,
    *,
    snapshot: Snapshot | None = None,
    clock: Clock | None = None,
    binder: Binder | None = None,
    tie_break_seed: int | None = None,
    api: ObjectAPI | None = None,
) -> dict[str, Framework]:
    """One Framework per profile, keyed by schedulerName; all share the snapshot and clock.
    `tie_break_seed` seeds each profile's choice among equally good nodes (None: unpredictable)."""
    snap = snapshot if snapshot is not None else Snapshot()
    frameworks: dict[str, Framework] = {}
    queue_sorts: dict[str, tuple[str, int]] = {}
    for p, profile in enumerate(config.profiles):
        where = f"profiles[{p}]"
        if profile.scheduler_name in frameworks:
            raise _invalid(f"{where}.schedulerName: duplicate scheduler name {profile.scheduler_name!r}")
        _check_names(profile.plugins, registry, f"{where}.plugins")
        plugins = merge_plugins(default_plugins, profile.plugins)
        args = _plugin_args(profile.plugin_config, registry, where)
        framework = Framework(
            profile.scheduler_name,
            snapshot=snap,
            clock=clock,
            binder=binder,
            api=api,
            rng=random.Random(tie_break_seed),
            percentage_of_nodes_to_score=(
                profile.percentage_of_nodes_to_score
                if profile.percentage_of_nodes_to_score is not None
                else config.percentage_of_nodes_to_score
            ),
        )
        wanted = {ref.name for f in [*POINT_FIELDS.values(), "multi_point"] for ref in getattr(plugins, f).enabled}
        instances: dict[str, Plugin] = {}
        for name in sorted(wanted):
            spec = registry[name]
            plugin_args = args.get(name) or (spec.args_model() if spec.args_model else None)
            try:
                instances[name] = spec.factory(plugin_args, framework)
            except (ValueError, TypeError) as exc:
                raise _invalid(f"{where}.pluginConfig: plugin {name}: {exc}") from None
        points, weights = _expand(plugins, instances, where)
        if len(points["queueSort"]) != 1:
            names = [pl.name for pl in points["queueSort"]]
            raise _invalid(f"{where}.plugins.queueSort: exactly one queue sort plugin must be enabled, got {names}")
        if not points["bind"]:
            raise _invalid(f"{where}.plugins.bind: at least one bind plugin must be enabled")
        sort_name = points["queueSort"][0].name
        queue_sorts[where] = (sort_name, p)
        framework.set_plugins(points, weights)
        frameworks[profile.scheduler_name] = framework
    sort_names = {name for name, _ in queue_sorts.values()}
    if len(sort_names) > 1:
        first = next(iter(queue_sorts.values()))[0]
        odd = next(w for w, (name, _) in queue_sorts.items() if name != first)
        raise _invalid(
            f"{odd}.plugins.queueSort: all profiles must use the same queue sort plugin, got {sorted(sort_names)}"
        )
    return frameworks


def _check_names(plugins: Plugins, registry: Registry, where: str) -> None:
    for point in [*POINT_FIELDS, "multiPoint"]:
        plugin_set: PluginSet = getattr(plugins, POINT_FIELDS.get(point, "multi_point"))
        for kind, refs in (("enabled", plugin_set.enabled), ("disabled", plugin_set.disabled)):
            for i, ref in enumerate(refs):
                if ref.name == "*" and kind == "disabled":
                    continue
                if ref.name not in registry:
                    raise _invalid(f"{where}.{point}.{kind}[{i}].name: unknown plugin {ref.name!r}")
                if ref.weight is not None and point not in ("score", "multiPoint"):
                    raise _invalid(f"{where}.{point}.{kind}[{i}].weight: weights apply to score plugins only")


def _plugin_args(configs: Sequence[Any], registry: Registry, where: str) -> dict[str, BaseModel]:
    out: dict[str, BaseModel] = {}
    for j, entry in enumerate(configs):
        path = f"{where}.pluginConfig[{j}]"
        if entry.name not in registry:
            raise _invalid(f"{path}.name: unknown plugin {entry.name!r}")
        if entry.name in out:
            raise _invalid(f"{path}.name: duplicate pluginConfig for {entry.name!r}")
        model = registry[entry.name].args_model
        raw = {k: v for k, v in entry.args.items() if k not in _ARGS_META_KEYS}
        if model is None:
            if raw:
                raise _invalid(f"{path}.args: plugin {entry.name} takes no args")
            continue
        try:
            out[entry.name] = model.model_validate(raw)
        except ValidationError as exc:
            raise _validation_error(exc, [*_split(path), "args"]) from None
    return out


def _split(path: str) -> list[int | str]:
    """'profiles[0].pluginConfig[2]' -> ['profiles', 0, 'pluginConfig', 2] (for field_path)."""
    parts: list[int | str] = []
    for chunk in path.split("."):
        name, _, rest = chunk.partition("[")
        parts.append(name)
        while rest:
            index, _, rest = rest.partition("]")
            parts.append(int(index))
            rest = rest.removeprefix("[")
    return parts


def _expand(
    plugins: Plugins, instances: Mapping[str, Plugin], where: str
) -> tuple[dict[str, list[Plugin]], dict[str, int]]:
    points: dict[str, list[Plugin]] = {}
    weights: dict[str, int] = {}
    for point, attr in POINT_FIELDS.items():
        protocol: Any = EXTENSION_POINTS[point]
        explicit: PluginSet = getattr(plugins, attr)
        disabled = {ref.name for ref in explicit.disabled}
        explicit_names = [ref.name for ref in explicit.enabled]
        overrides: list[str] = []
        multi: list[str] = []
        if "*" not in disabled:
            for ref in plugins.multi_point.enabled:
                if not isinstance(instances[ref.name], protocol) or ref.name in disabled:
                    continue
                if ref.name in explicit_names:
                    overrides.append(ref.name)
                    continue
                if ref.name in multi:
                    raise _invalid(f"{where}.plugins.multiPoint: plugin {ref.name!r} listed twice")
                multi.append(ref.name)
                if point == "score":
                    weights[ref.name] = ref.weight or 1
        rest = [n for n in explicit_names if n not in overrides]
        order = [n for n in explicit_names if n in overrides] + multi + rest
        if len(set(order)) != len(order):
            raise _invalid(f"{where}.plugins.{point}: a plugin is enabled twice")
        for i, ref in enumerate(explicit.enabled):
            if not isinstance(instances[ref.name], protocol):
                field = f"{where}.plugins.{point}.enabled[{i}].name"
                raise _invalid(f"{field}: plugin {ref.name!r} does not implement {point}")
            if point == "score":
                weights[ref.name] = ref.weight or 1
        points[point] = [instances[n] for n in order]
    return points, weights
