"""Daemon configuration: defaults < YAML file < environment < flags, validated by pydantic.

A bad value stops the program at start with the field named (`ConfigError`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from common.flags import deprecation

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger("loadline.config")


class ConfigError(ValueError):
    pass


def _describe(exc: ValidationError, source: str) -> str:
    lines = [f"invalid configuration ({source}):"]
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "(root)"
        lines.append(f"  {field}: {error['msg']} (got {error.get('input')!r})")
    return "\n".join(lines)


def load_settings(
    model: type[M],
    *,
    file: str | Path | None = None,
    env_prefix: str | None = None,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    renamed: Mapping[str, str] | None = None,
) -> M:
    """Build `model` from a YAML file, `<PREFIX>_<FIELD>` environment variables and explicit flags (None = unset).

    `renamed` maps a setting's old name to its field: the old YAML key and environment variable still set it, with
    a warning (common/flags.py), unless the new name is given in the same source."""
    renamed = renamed or {}
    values: dict[str, Any] = {}
    sources: list[str] = []
    if file is not None:
        import yaml  # only with a file: most deployments set flags and environment variables (~1 MiB resident)

        path = Path(file)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of settings, not {type(loaded).__name__}")
        for old, new in renamed.items():
            if old in loaded:
                log.warning(deprecation(f"{old} (in {path})", new))
                value = loaded.pop(old)
                loaded.setdefault(new, value)
        values.update(loaded)
        sources.append(str(path))
    if env_prefix:
        env = os.environ if environ is None else environ
        prefix = env_prefix.upper().rstrip("_") + "_"
        for name, field in model.model_fields.items():
            for key in {name, field.alias or name}:
                variable = prefix + key.upper()
                if variable in env:
                    values[name] = env[variable]
                    sources.append(variable)
        for old, new in renamed.items():
            variable = prefix + old.upper()
            if variable in env:
                log.warning(deprecation(variable, prefix + new.upper()))
                if prefix + new.upper() not in env:
                    values[new] = env[variable]
                    sources.append(variable)
    if flags:
        values.update({k: v for k, v in flags.items() if v is not None})
        sources.append("flags")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, ", ".join(sources) or "defaults")) from None
