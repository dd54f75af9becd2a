"""Plugin registry: plugin name → how to build it (kube-scheduler's `runtime.Registry`).

The in-tree table lives in `scheduler_plugin.plugins.registry`; out-of-tree plugins are
merged in with `Registry.merged`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from scheduler_plugin.framework.interfaces import FrameworkHandle, Plugin

Factory = Callable[[BaseModel | None, FrameworkHandle], Plugin]
ArgsT = TypeVar("ArgsT", bound=BaseModel)


def plugin_args(plugin: str, args: BaseModel | None, model: type[ArgsT]) -> ArgsT:
    """A factory's args: the model's defaults when none were configured. Args of another type are
    a wiring mistake (e.g. a registry entry pointing at the wrong model), an error naming the plugin,
    never a silent fall-back to the defaults."""
    if args is None:
        return model()
    if not isinstance(args, model):
        raise TypeError(f"plugin {plugin} takes {model.__name__} args, got {type(args).__name__}")
    return args


@dataclass(frozen=True, slots=True)
class PluginSpec:
    factory: Factory
    args_model: type[BaseModel] | None = None  # None: the plugin takes no args


class Registry(Mapping[str, PluginSpec]):
    def __init__(self, entries: Mapping[str, PluginSpec]) -> None:
        self._entries = dict(entries)

    def __getitem__(self, name: str) -> PluginSpec:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def merged(self, other: Mapping[str, PluginSpec]) -> Registry:
        clash = set(self._entries) & set(other)
        if clash:
            raise ValueError(f"plugin names registered twice: {sorted(clash)}")
        return Registry({**self._entries, **other})
