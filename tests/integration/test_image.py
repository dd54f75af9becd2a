"""Loadline's image, built from the Dockerfile by `make image` (tests/harness/image.py), runs every component."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator

import pytest

from tests.harness.image import Buildah, ImageRef, buildah_session, default_name, ensure_image, load_archive

pytestmark = pytest.mark.integration
COMPONENTS = ("agent", "manager", "scheduler", "descheduler", "extender")
RUN = ("run", "--runtime", "runc", "--network", "none")


@pytest.fixture(scope="module")
def image() -> ImageRef:
    return ensure_image()


@pytest.fixture(scope="module")
def container(image: ImageRef) -> Iterator[tuple[Buildah, str]]:
    """A working container from the archive, in a private buildah storage removed afterwards."""
    with buildah_session() as b:
        load_archive(b, image)
        yield b, b.run("from", "--pull-never", image.name, what="buildah from").strip()


def test_archive_is_named_for_import(image: ImageRef) -> None:
    """`ctr images import` and `buildah pull` take the name from the OCI index's ref.name annotation."""
    assert image.name == default_name()
    with tarfile.open(image.archive) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]] == [image.name]
    assert ensure_image().archive == image.archive  # cached: same inputs, same archive, no rebuild


def test_image_runs_as_non_root_by_default(container: tuple[Buildah, str]) -> None:
    b, ctr = container
    config = json.loads(b.run("inspect", "--type", "container", ctr, what="buildah inspect"))["OCIv1"]["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["loadline"]
    ids = b.run(*RUN, ctr, "--", "python3", "-c", "import os; print(os.getuid(), os.getgid())", what="id").split()
    assert ids == ["65532", "65532"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_component_starts_from_the_image(container: tuple[Buildah, str], component: str) -> None:
    """`loadline <component> --help` imports the component and its dependencies inside the image."""
    b, ctr = container
    out = b.run(*RUN, ctr, "--", "loadline", component, "--help", what=f"loadline {component} --help")
    assert out.startswith(f"usage: loadline {component}"), out[:500]
