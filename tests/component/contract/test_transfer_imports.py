"""What a release needs for each PD transfer backend (plugins/module_utils/sglang_preflight.py TRANSFER_PACKAGES) is
what SGLang 0.5.23 imports, read from its source in the parser venv: the module at its import site, the backend
names among its choices, and mooncake_tcp rewritten to mooncake by its PD hook."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import TRANSFER_PACKAGES

REPO = Path(__file__).resolve().parents[3]
PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"

# Backend -> (the file of SGLang that imports the backend's module when an engine starts, relative to sglang/srt).
IMPORT_SITES = {
    "mooncake": "distributed/device_communicators/mooncake_transfer_engine.py",
    "mooncake_tcp": "distributed/device_communicators/mooncake_transfer_engine.py",
    "nixl": "disaggregation/nixl/conn.py",
}


@pytest.fixture(scope="module")
def srt() -> Path:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv` (make test does it)")
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = subprocess.run([str(PARSER_PYTHON), "-c", code], capture_output=True, text=True, check=True).stdout
    return Path(site.strip()) / "sglang" / "srt"


@pytest.mark.parametrize("backend", sorted(TRANSFER_PACKAGES))
def test_the_module_is_the_one_sglang_imports(srt: Path, backend: str) -> None:
    module, requirement = TRANSFER_PACKAGES[backend]
    parent, name = module.rsplit(".", 1)
    source = (srt / IMPORT_SITES[backend]).read_text()
    assert f"from {parent}.{name} import " in source or f"from {parent} import {name}" in source, module
    assert requirement.split("==")[0] in {"mooncake-transfer-engine", "nixl"} and "==" in requirement


def test_the_backends_are_sglang_choices_and_mooncake_tcp_is_mooncake(srt: Path) -> None:
    choices = (srt / "arg_groups/choices.py").read_text()
    assert all(f'"{backend}"' in choices for backend in TRANSFER_PACKAGES)
    hook = (srt / "arg_groups/pd_disaggregation_hook.py").read_text()
    assert 'disaggregation_transfer_backend == "mooncake_tcp"' in hook
    assert 'disaggregation_transfer_backend="mooncake"' in hook
    assert TRANSFER_PACKAGES["mooncake_tcp"] == TRANSFER_PACKAGES["mooncake"]
