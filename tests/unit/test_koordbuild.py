"""The Koordinator wrapper module adopts Koordinator's go.mod under our module path."""

from __future__ import annotations

from tests.harness.koordbuild import KOORDINATOR_MODULE, KOORDINATOR_VERSION, _wrapper_gomod

UPSTREAM = f"""module {KOORDINATOR_MODULE}

go 1.24.0

toolchain go1.24.4

require (
	k8s.io/api v0.35.2
)

replace k8s.io/api => k8s.io/api v0.35.2
"""


def test_wrapper_gomod_keeps_requires_and_replaces() -> None:
    body = _wrapper_gomod(UPSTREAM)
    assert body.startswith("module loadline.dev/koordinator-components\n")
    assert f"module {KOORDINATOR_MODULE}" not in body
    assert "toolchain" not in body  # a toolchain line would ask the proxy-only machine for another Go
    assert "replace k8s.io/api => k8s.io/api v0.35.2" in body
    assert "\tk8s.io/api v0.35.2" in body
    assert body.rstrip().endswith(f"require {KOORDINATOR_MODULE} v{KOORDINATOR_VERSION}")
