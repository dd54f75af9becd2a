"""Daemon configuration: defaults < YAML file < environment < flags, validated by pydantic.

A bad value stops the program at start with the field named (`ConfigError`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


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
) -> M:
    """Build `model` from a YAML file, `<PREFIX>_<FIELD>` environment variables and explicit flags (None = unset)."""
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
    if flags:
        values.update({k: v for k, v in flags.items() if v is not None})
        sources.append("flags")
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, ", ".join(sources) or "defaults")) from None
