"""sglang_closure: what the drift exporter and the verify snapshot ship of module_utils is enough to run them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_closure import (
    HERE,
    PACKAGE,
    closure,
    imports_of,
    program_closure,
)

REPO = Path(__file__).resolve().parents[2]
EXPORTER = REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_monitoring/files/sglang_drift_export.py"
SNAPSHOT = REPO / "verify/hostside/snapshot.py"


def ship(tmp_path: Path, names: list[str]) -> Path:
    """The modules under their own import name in a bare folder, as the role and verify put them on a host."""
    if REPO.name == "mutants":
        pytest.skip("under make mutation the shipped copies are mutmut's: they import mutmut, not in a bare folder")
    package = tmp_path.joinpath(*PACKAGE.split("."))
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    for name in names:
        shutil.copy(HERE / f"{name}.py", package / f"{name}.py")
    return tmp_path


@pytest.mark.parametrize("program", [EXPORTER, SNAPSHOT], ids=["drift exporter", "verify snapshot"])
def test_a_program_runs_beside_its_closure_alone(tmp_path: Path, program: Path) -> None:
    """The program imports with nothing from the work tree on the path but its closure (here: --help, or the
    snapshot's import of everything it needs)."""
    root = ship(tmp_path, program_closure(program))
    shutil.copy(program, root / program.name)
    code = f"import runpy, sys; sys.argv = [{program.name!r}, '--help']; runpy.run_path({program.name!r}, run_name='x')"
    proc = subprocess.run(
        [sys.executable, "-S", "-c", code], cwd=root, capture_output=True, text=True, check=False, env={}
    )
    assert "ModuleNotFoundError" not in proc.stderr and "ImportError" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("entry", ["sglang_layers", "sglang_engine_live", "smg_live", "sglang_drift"])
def test_the_closure_alone_imports(tmp_path: Path, entry: str) -> None:
    """A package holding only the closure imports the entry module (nothing else from module_utils is needed)."""
    root = ship(tmp_path, closure(entry))
    proc = subprocess.run(
        [sys.executable, "-S", "-c", f"import {PACKAGE}.{entry}"], cwd=root, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_closure_follows_imports_and_not_more() -> None:
    names = program_closure(EXPORTER)
    assert {"sglang_drift", "sglang_http", "sglang_schema", "sglang_layers"} <= set(names)
    assert "sglang_closure" not in names and "sglang_report" not in names
    assert closure("sglang_releases") == ["sglang_releases"]
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        closure("no_such_module")


def test_imports_of_reads_each_form() -> None:
    source = (
        "from .sglang_flags import parse_script\n"
        f"from {PACKAGE}.sglang_http import Reply\n"
        f"from {PACKAGE} import sglang_layers, smg_live as live\n"
        f"from {PACKAGE} import (\n    sglang_drift,\n    sglang_schema,\n)\n"
        "from ansible.module_utils.basic import AnsibleModule\n"
    )
    assert imports_of(source) == [
        "sglang_flags",
        "sglang_http",
        "sglang_layers",
        "smg_live",
        "sglang_drift",
        "sglang_schema",
    ]
