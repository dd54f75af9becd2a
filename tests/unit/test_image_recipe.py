"""The image's cache key and name (tests/harness/image.py): rebuilt exactly when the package changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.harness import image


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of what the image is built from, so the test can change it."""
    src = image.REPO
    for name in ("pyproject.toml", "setup.py", "Dockerfile", "README.md"):
        shutil.copy2(src / name, tmp_path / name)
    for pkg in image.PACKAGES:
        shutil.copytree(src / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(image, "REPO", tmp_path)
    return tmp_path


def test_key_follows_the_package_files(repo: Path) -> None:
    name = image.default_name()
    before = image.image_key(name)
    assert image.image_key(name) == before
    (repo / "README.md").write_text("edited\n")  # not in the image (its wheel carries a stub description)
    (repo / "common" / "__pycache__").mkdir(exist_ok=True)
    (repo / "common" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    (repo / "agent" / "collectors" / "_cgread.cpython-311-x86_64-linux-gnu.so").write_bytes(b"built in place")
    assert image.image_key(name) == before  # the wheel compiles its own C reader
    (repo / "setup.py").write_text((repo / "setup.py").read_text() + "\n# changed\n")
    assert image.image_key(name) != before
    (repo / "setup.py").write_text((repo / "setup.py").read_text().removesuffix("\n# changed\n"))
    assert image.image_key(name) == before
    assert image.image_key("registry.example.com/loadline:0.2.0") != before
    module = repo / "common" / "cli" / "__init__.py"
    module.write_text(module.read_text() + "\n# changed\n")
    changed = image.image_key(name)
    assert changed != before
    (repo / "Dockerfile").write_text((repo / "Dockerfile").read_text() + "\n# changed\n")
    assert image.image_key(name) != changed


def test_chart_default_image_is_the_one_make_image_builds() -> None:
    chart = image.REPO / "deploy" / "helm" / "loadline"
    values = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    assert f"{values['repository']}:{values['tag'] or app_version}" == image.default_name()
    assert image.default_name() == f"localhost/loadline:{image.package_version()}"


def test_invalid_image_name_is_refused() -> None:
    with pytest.raises(image.ImageError, match="invalid image name"):
        image.ensure_image("Registry.Example.com/Loadline:0.2.0 ")
