"""Old spellings of flags and settings, kept working with a warning after a rename.

Every daemon spells one meaning one way (`--port`, `--bind-address` for its HTTP server; docs/install.md lists
them). A renamed flag keeps its old spelling as a hidden alias that sets the same value and logs
`--metrics-port is deprecated, use --port`; a renamed setting keeps its old YAML key and environment variable the
same way (`common.config.load_settings(renamed=...)`). The warning goes out when the flag is parsed, before the
daemon sets up its own logging, so Python's last-resort handler prints it to stderr.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("loadline.flags")


def deprecation(old: str, new: str) -> str:
    return f"{old} is deprecated, use {new}"


class DeprecatedAlias(argparse.Action):
    """Stores into the replacement flag's destination and logs that the old spelling is deprecated."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, replacement: str, **kwargs: Any) -> None:
        self.replacement = replacement
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        log.warning(deprecation(option_string or self.option_strings[0], self.replacement))
        setattr(namespace, self.dest, values)


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, replacement: str) -> None:
    """`old` sets what `replacement` (a flag already on `parser`) sets; hidden from --help."""
    target = next((a for a in parser._actions if replacement in a.option_strings), None)
    if target is None:
        raise ValueError(f"{replacement} is not a flag of {parser.prog}")
    copied: dict[str, Any] = {"nargs": target.nargs, "const": target.const, "metavar": target.metavar}
    if target.type is not None:
        copied["type"] = target.type
    parser.add_argument(
        old,
        dest=target.dest,
        action=DeprecatedAlias,
        replacement=replacement,
        default=argparse.SUPPRESS,  # absent, it leaves the replacement's default alone
        help=argparse.SUPPRESS,
        **copied,
    )


def is_deprecated_alias(action: argparse.Action) -> bool:
    return isinstance(action, DeprecatedAlias)
