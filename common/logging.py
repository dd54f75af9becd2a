"""Logging for daemons: one line per event, key=value context, optional JSON."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any


class _KeyValueFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"
        context = getattr(record, "ctx", None) or {}
        extra = "".join(f" {k}={_value(v)}" for k, v in context.items())
        line = f"{ts} {record.levelname[0]} {record.name}: {record.getMessage()}{extra}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **(getattr(record, "ctx", None) or {}),
        }
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def _value(v: Any) -> str:
    text = str(v)
    return json.dumps(text) if (" " in text or not text) else text


def setup_logging(level: str = "info", *, json_output: bool = False) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if json_output else _KeyValueFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def ctx(**values: Any) -> dict[str, Any]:
    """`log.info("published", extra=ctx(node=name, seconds=0.2))`"""
    return {"ctx": values}


LOG_LEVELS = ("debug", "info", "warning", "error")


def add_log_level_flag(parser: argparse.ArgumentParser, default: str | None = "info", **kwargs: Any) -> None:
    """`--log-level`, spelled and explained the same in every component."""
    parser.add_argument(
        "--log-level", default=default, choices=LOG_LEVELS, help="least severe level logged (default info)", **kwargs
    )
