"""The controller's paths (plugin_utils/sglang_paths.py): each from its environment variable, else under the project
directory; the project directory is the checkout when the collection is used in place, else the current
directory (an installed collection), never a guess from where an installed file sits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths

REPO = Path(__file__).resolve().parents[2]
SETTINGS = ("SGLANG_DSV4_HOME", "SGLANG_DSV4_PARSER_VENV", "SGLANG_DSV4_PERF_VENV", "SGLANG_DSV4_PERF_CACHE",
            "SGLANG_DSV4_MODELS_DIR")  # fmt: skip


@pytest.fixture(autouse=True)
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)


def test_in_place_the_project_is_the_checkout() -> None:
    assert sglang_paths.project_dir() == REPO
    assert sglang_paths.perf_venv() == REPO / ".cache" / "aiconfigurator-venv"
    assert sglang_paths.perf_cache() == REPO / ".cache" / "perf"
    assert sglang_paths.parser_venv() == REPO / ".cache" / "sglang-parser-venv"
    assert sglang_paths.models_dir() == REPO / "models"


def test_each_path_is_its_own_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLANG_DSV4_HOME", str(tmp_path / "home"))
    assert sglang_paths.perf_venv() == tmp_path / "home" / ".cache" / "aiconfigurator-venv"
    assert sglang_paths.models_dir() == tmp_path / "home" / "models"
    for name, read in [
        ("SGLANG_DSV4_PARSER_VENV", sglang_paths.parser_venv),
        ("SGLANG_DSV4_PERF_VENV", sglang_paths.perf_venv),
        ("SGLANG_DSV4_PERF_CACHE", sglang_paths.perf_cache),
        ("SGLANG_DSV4_MODELS_DIR", sglang_paths.models_dir),
    ]:
        monkeypatch.setenv(name, str(tmp_path / name))
        assert read() == tmp_path / name


def test_installed_the_project_is_the_current_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A copy of the module under an installed collection's path (no ansible.cfg above it) reads the current
    directory's project."""
    installed = tmp_path / ".ansible" / "collections" / "ansible_collections" / "sglang" / "dsv4" / "plugins"
    (installed / "plugin_utils").mkdir(parents=True)
    shutil.copy(sglang_paths.__file__, installed / "plugin_utils" / "sglang_paths.py")
    namespace: dict[str, object] = {"__file__": str(installed / "plugin_utils" / "sglang_paths.py")}
    exec(compile((installed / "plugin_utils" / "sglang_paths.py").read_text(), "sglang_paths", "exec"), namespace)
    monkeypatch.chdir(tmp_path)
    assert namespace["project_dir"]() == tmp_path  # type: ignore[operator]
    (tmp_path / ".ansible" / "ansible.cfg").write_text("")  # not a checkout: the collection is not in place there
    assert namespace["perf_venv"]() == tmp_path / ".cache" / "aiconfigurator-venv"  # type: ignore[operator]
