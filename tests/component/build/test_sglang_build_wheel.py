"""The sglang_build role on its default source: the real pinned SGLang 0.5.23 wheel plus the patch series.

Runs the role against localhost with its defaults (source, wheel pin, series), the wheel copied from the
controller's .cache/wheels, and the kernel package built for sm_90a with the real nvcc. The tests run in
order; each depends on the state the previous ones left behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sglang_build_lab import REPO, ROLE, BuildLab, role_default

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SERIES = REPO / "patches/sglang-0.5.23"
sys.path.insert(0, str(ROLE / "files"))
import sglang_wheel_patch  # noqa: E402


def series_version() -> str:
    digest = sglang_wheel_patch.series_hash(sglang_wheel_patch.read_series(SERIES))
    return f"0.5.23+dsv4bf16.{digest[:12]}"


def test_wrong_wheel_sha256_stops_the_build(wheel_lab: BuildLab) -> None:
    run = wheel_lab.play(sglang_build_wheel_sha256="0" * 64)
    assert run.rc != 0
    assert f"has sha256 {role_default('sglang_build_wheel_sha256')}, expected {'0' * 64}" in run.output, run.output
    assert not wheel_lab.current.exists()


def test_stale_patch_stops_the_build_and_names_itself(wheel_lab: BuildLab, tmp_path: Path) -> None:
    patches = sglang_wheel_patch.read_series(SERIES)
    stale = tmp_path / patches[1].name
    stale.write_text(patches[1].read_text().replace("return index_head_dim + index_head_dim // 128 * 4", "return 132"))
    run = wheel_lab.play(sglang_build_patches=[str(patches[0]), str(stale), *map(str, patches[2:])])
    assert run.rc != 0
    assert f"Patch {stale.name}" in run.output and "does not apply" in run.output, run.output[-3000:]
    assert "1 earlier patch(es)" in run.output
    assert not wheel_lab.current.exists()


def test_pinned_wheel_builds_the_patched_release(wheel_lab: BuildLab) -> None:
    run = wheel_lab.play()
    assert run.rc == 0, run.output[-4000:]
    release = Path(wheel_lab.link(wheel_lab.current) or "")
    assert release.name.startswith(role_default("sglang_build_wheel_sha256")[:12] + "-")

    data = json.loads((release / "manifest.json").read_text())
    inputs = data["inputs"]
    assert data["source"] == "wheel" and inputs["source"] == "wheel"
    assert inputs["wheel_sha256"] == role_default("sglang_build_wheel_sha256")
    assert [name for name, _ in inputs["patches"]] == [p.name for p in sglang_wheel_patch.read_series(SERIES)]

    # The role's series digest (Jinja) and the tool's agree: the version names the series.
    version = series_version()
    name = f"sglang-{version}-cp311-cp311-manylinux_2_34_x86_64.whl"
    assert sorted(data["wheels"]) == sorted([name, *[n for n in data["wheels"] if n.startswith("dsv4_index_k-")]])
    assert len(data["wheels"]) == 2
    wheel = release / "wheels" / name
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == data["wheels"][name]

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert f"Version: {version}\n" in archive.read(f"sglang-{version}.dist-info/METADATA").decode()
        assert "sglang/srt/layers/attention/dsv4/index_k_dtype.py" in names
        pool = archive.read("sglang/srt/mem_cache/deepseek_v4_memory_pool.py").decode()
        assert "bf16_index_k_enabled" in pool
        header = archive.read("sglang/kernels/jit/include/sgl_kernel/deepseek_v4/index_k_store.cuh")
        assert header == (REPO / "kernels/csrc/index_k_store.cuh").read_bytes()

    # Installed into the release venv under the local version.
    python = release / "venv/bin/python"
    code = "import importlib.metadata as m; print(m.version('sglang'))"
    out = subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True, cwd="/")
    assert out.stdout.strip() == version
    assert not (wheel_lab.root / "opt/build").exists()
    assert wheel_lab.switches() == [str(release)]


def test_second_run_changes_nothing(wheel_lab: BuildLab) -> None:
    before = wheel_lab.link(wheel_lab.current)
    run = wheel_lab.play()
    assert run.rc == 0, run.output[-3000:]
    assert run.changed == 0, run.output[-3000:]
    assert "exists, nothing to build" in run.output
    assert wheel_lab.link(wheel_lab.current) == before


def test_tool_and_role_need_only_the_standard_library() -> None:
    """The build host runs the tool with its own Python: no import beyond the standard library."""
    tool = ROLE / "files/sglang_wheel_patch.py"
    assert shutil.which("git")
    code = f"import sys; sys.path.insert(0, {str(tool.parent)!r}); import sglang_wheel_patch"
    subprocess.run([sys.executable, "-I", "-S", "-c", code], check=True, capture_output=True, text=True)
