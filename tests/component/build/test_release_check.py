"""The release check (the sglang_release_check module) on mooncake-transfer-engine's real wheel, the package the
release installs for the mooncake backend: on a host without the NVIDIA driver or the RDMA verbs library its engine
cannot load, and the check refuses the release with the missing library named and where it comes from."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import SYSTEM_LIBRARIES, TRANSFER_PACKAGES
from sglang_build_lab import REPO


def backend_wheel(requirement: str) -> Path:
    """The pinned wheel, from .cache/wheels; downloaded from the package index when absent."""
    name, version = requirement.split("==")
    found = sorted((REPO / ".cache/wheels").glob(f"{name.replace('-', '_')}-{version}-cp311-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", requirement,
               "-d", str(REPO / ".cache/wheels")]  # fmt: skip
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        found = sorted((REPO / ".cache/wheels").glob(f"{name.replace('-', '_')}-{version}-cp311-*.whl"))
    return found[-1]


PLAY = """\
- name: Check a release
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Import what the engine imports
      sglang.dsv4.sglang_release_check:
        python: "{{ python }}"
        imports: "{{ imports }}"
        fix: Rerun.
      register: checked
      ignore_errors: true
    - name: Keep the result
      ansible.builtin.copy:
        content: "{{ checked | to_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def check(python: Path, imports: dict[str, str]) -> dict[str, object]:
    """The module's result, run by ansible-playbook against localhost."""
    play, out = python.parents[2] / "check.yml", python.parents[2] / "result.json"
    play.write_text(PLAY)
    extra = json.dumps({"python": str(python), "imports": imports, "out": str(out),
                        "ansible_python_interpreter": sys.executable})  # fmt: skip
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "-c", "local", str(play),
           "-e", extra]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return dict(json.loads(out.read_text()))


@pytest.mark.skipif(ctypes.util.find_library("cuda") is not None, reason="this host has the NVIDIA driver")
def test_mooncake_without_its_system_libraries_is_refused(tmp_path: Path) -> None:
    module, requirement = TRANSFER_PACKAGES["mooncake"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    with zipfile.ZipFile(backend_wheel(requirement)) as wheel:
        wheel.extractall(purelib)
    for path in Path(purelib).rglob("*.so*"):
        path.chmod(0o755)
    why = "disaggregation_transfer_backend mooncake imports it"
    result = check(venv / "bin/python", {module: why, "json": "a module every release has"})
    assert result["failed"] is True
    imports = result["imports"]
    assert isinstance(imports, dict) and imports["json"] == "ok"
    error = str(imports[module])
    assert error.startswith("ImportError: ") and "cannot open shared object file" in error, error
    missing = [lib for lib in SYSTEM_LIBRARIES if lib in error]
    assert len(missing) == 1, error
    message = str(result["msg"])
    assert message.startswith(f"module {module} does not import in the new release's Python {venv}/bin/python")
    assert f"{why}. {missing[0]} is {SYSTEM_LIBRARIES[missing[0]]}. Rerun." in message


def test_a_release_with_what_the_engine_imports_passes(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    result = check(venv / "bin/python", {"json": "the engine imports it", "email.parser": "so does this"})
    assert not result.get("failed"), result
    assert result["imports"] == {"json": "ok", "email.parser": "ok"} and result["changed"] is False
