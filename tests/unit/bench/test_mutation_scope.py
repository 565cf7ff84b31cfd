"""The mutation run's scope (bench/mutation_tree.py, pyproject.toml [tool.mutmut]) and the report's folders
(bench/mutation_report.py): every Python folder of the collection's plugins is mutated, and each mutant is counted
under the folder of source_paths that holds it."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "collections/ansible_collections/sglang/dsv4/plugins"


def bench(name: str) -> ModuleType:
    if str(REPO / "bench") not in sys.path:
        sys.path.insert(0, str(REPO / "bench"))
    return importlib.import_module(name)


def test_every_python_folder_of_the_plugins_is_mutated() -> None:
    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mutmut"]["source_paths"]
    assert sorted(listed) == sorted(str(at) for at in bench("mutation_tree").SOURCES)
    with_python = {p.parent.name for p in PLUGINS.glob("*/*.py")} - {"doc_fragments"}  # documentation only
    assert {f"ansible_collections/sglang/dsv4/plugins/{name}" for name in with_python} <= set(listed)
    assert (PLUGINS / "module_utils/sglang_preflight_probe.py").is_file()  # the probe, under module_utils


@pytest.mark.parametrize(
    ("source", "folder"),
    [
        ("ansible_collections/sglang/dsv4/plugins/modules/sglang_deploy_records.py", "plugins/modules"),
        ("ansible_collections/sglang/dsv4/plugins/action/sglang_render_files.py", "plugins/action"),
        ("ansible_collections/sglang/dsv4/plugins/filter/sglang.py", "plugins/filter"),
        ("ansible_collections/sglang/dsv4/plugins/module_utils/sglang_preflight_probe.py", "plugins/module_utils"),
        ("sglang_envelope_cli/commands.py", "sglang_envelope_cli"),
        ("sglang_drift_export.py", "sglang_drift_export.py"),
    ],
)
def test_a_mutant_is_counted_under_its_folder(source: str, folder: str) -> None:
    assert bench("mutation_report").Mutant("x.f__mutmut_1", Path(source), "killed").folder == folder
