"""Field errors worded as the API server words them, and the Kubernetes name rules they check.

An admission webhook that refuses an object answers with the rule it broke. The messages read like
k8s.io/apimachinery/pkg/util/validation/field's (`<path>: Invalid value: "x": <detail>`, several as
`[e1, e2]`), so a refusal from Loadline reads like one from the API server or from Koordinator's webhook.
The name rules are k8s.io/apimachinery/pkg/util/validation's (qualified names, label values, DNS subdomains).
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class ErrorType(enum.StrEnum):
    INVALID = "Invalid value"
    REQUIRED = "Required value"
    FORBIDDEN = "Forbidden"
    NOT_SUPPORTED = "Unsupported value"
    TOO_LONG = "Too long"


_NO_VALUE = object()


def _go_value(value: Any) -> str:
    """A bad value as Go's %q (strings) or %#v (numbers, booleans) prints it."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str)


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    type: ErrorType
    detail: str = ""
    value: Any = _NO_VALUE

    def __str__(self) -> str:
        body = str(self.type)
        if self.type in (ErrorType.INVALID, ErrorType.NOT_SUPPORTED) and self.value is not _NO_VALUE:
            body += f": {_go_value(self.value)}"
        if self.detail:
            body += f": {self.detail}"
        return f"{self.path}: {body}"


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError(path, ErrorType.INVALID, detail, value)


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(path, ErrorType.REQUIRED, detail)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError(path, ErrorType.FORBIDDEN, detail)


def not_supported(path: str, value: Any, supported: Iterable[str]) -> FieldError:
    return FieldError(path, ErrorType.NOT_SUPPORTED, "supported values: " + ", ".join(json.dumps(s) for s in supported),
                      value)  # fmt: skip


def aggregate(errors: Sequence[FieldError]) -> str:
    """utilerrors.NewAggregate(...).Error(): one error as is, several as `[e1, e2]`."""
    if len(errors) == 1:
        return str(errors[0])
    return "[" + ", ".join(str(e) for e in errors) + "]"


# --- names (k8s.io/apimachinery/pkg/util/validation/validation.go) ------------------------------------------------
_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
NAME_MAX = 63
DNS_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
ANNOTATIONS_TOTAL_MAX = 256 * 1024  # TotalAnnotationSizeLimitB


def dns_subdomain_problems(value: str) -> list[str]:
    problems = []
    if len(value) > DNS_SUBDOMAIN_MAX:
        problems.append(f"must be no more than {DNS_SUBDOMAIN_MAX} characters")
    if not _DNS_SUBDOMAIN.match(value):
        problems.append("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
                        "'.', and must start and end with an alphanumeric character")  # fmt: skip
    return problems


def qualified_name_problems(value: str) -> list[str]:
    """A label or annotation key: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63 characters."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return ["prefix part must be non-empty"]
    if "/" in prefix:
        return ["a qualified name must consist of an optional DNS subdomain prefix and a name, with one '/'"]
    problems = [f"prefix part {p}" for p in dns_subdomain_problems(prefix)] if prefix else []
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > NAME_MAX:
        problems.append(f"name part must be no more than {NAME_MAX} characters")
    elif not _NAME.match(name):
        problems.append("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                        "with an alphanumeric character")  # fmt: skip
    return problems


def label_value_problems(value: str) -> list[str]:
    if len(value) > LABEL_VALUE_MAX:
        return [f"must be no more than {LABEL_VALUE_MAX} characters"]
    if value and not _NAME.match(value):
        return ["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                "must start and end with an alphanumeric character"]  # fmt: skip
    return []


def label_map_errors(path: str, labels: Mapping[str, str], *, check_values: bool = True) -> list[FieldError]:
    errors = [invalid(path, key, p) for key in labels for p in qualified_name_problems(key)]
    if check_values:
        errors += [invalid(f"{path}[{key}]", value, p) for key, value in labels.items()
                   for p in label_value_problems(value)]  # fmt: skip
    return errors


def annotation_map_errors(path: str, annotations: Mapping[str, str]) -> list[FieldError]:
    errors = [invalid(path, key, p) for key in annotations for p in qualified_name_problems(key.lower())]
    total = sum(len(k) + len(v) for k, v in annotations.items())
    if total > ANNOTATIONS_TOTAL_MAX:
        errors.append(FieldError(path, ErrorType.TOO_LONG, f"may not be more than {ANNOTATIONS_TOTAL_MAX} bytes"))
    return errors
