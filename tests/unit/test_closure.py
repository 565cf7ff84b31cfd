"""sglang_closure: what the drift exporter and the verify snapshot ship of module_utils is enough to import them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sglang_envelope.sglang_closure import HERE, closure


@pytest.mark.parametrize("entry", ["sglang_drift_export", "sglang_layers", "sglang_engine_live", "smg_live"])
def test_the_closure_alone_imports(tmp_path: Path, entry: str) -> None:
    """A package holding only the closure imports the entry module (nothing else from module_utils is needed)."""
    package = tmp_path / "shipped"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for name in closure(entry):
        shutil.copy(HERE / f"{name}.py", package / f"{name}.py")
    proc = subprocess.run(
        [sys.executable, "-c", f"import shipped.{entry}"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def test_closure_follows_imports_and_not_more() -> None:
    names = closure("sglang_drift_export")
    assert {"sglang_drift_export", "sglang_drift", "sglang_http", "sglang_schema"} <= set(names)
    assert "sglang_cli" not in names and "sglang_closure" not in names
    assert closure("sglang_releases") == ["sglang_releases"]
    with pytest.raises(FileNotFoundError, match="no_such_module"):
        closure("no_such_module")
