"""The sglang_build role against localhost, one scenario in order.

The fixture fork is built for one architecture (sm_90a) with the real nvcc;
each test depends on the state the previous ones left behind.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sglang_build_lab import FIXTURE, BuildLab

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def release_python(release: Path, code: str, **env: str) -> str:
    python = release / "venv/bin/python"
    out = subprocess.run(
        [str(python), "-c", code], check=True, capture_output=True, text=True, env={**os.environ, **env}, cwd="/"
    )
    return out.stdout.strip()


def manifest(release: Path) -> dict[str, object]:
    return json.loads((release / "manifest.json").read_text())


def test_short_sha_is_refused(build_lab: BuildLab) -> None:
    run = build_lab.play(sglang_build_source_sha=build_lab.shas[0][:12])
    assert run.rc != 0
    assert "full 40-hex commit SHA" in run.output
    assert not build_lab.current.exists()


def test_first_run_builds_and_switches(build_lab: BuildLab) -> None:
    run = build_lab.play()
    assert run.rc == 0, run.output[-3000:]
    assert run.changed > 0
    release = Path(build_lab.link(build_lab.current) or "")
    assert release.parent == build_lab.root / "opt/releases"
    assert release.name.startswith(build_lab.shas[0][:12] + "-")
    assert build_lab.switches() == [str(release)]

    data = manifest(release)
    inputs = data["inputs"]
    assert isinstance(inputs, dict)
    assert inputs["source_sha"] == build_lab.shas[0]
    assert inputs["cuda_archs"] == ["90a"]
    assert str(inputs["nvcc_version"]).startswith("V")
    assert [name for name, _ in inputs["patches"]] == ["ok.patch"]
    assert inputs["overlays"][0]["dest"] == "third_party/dsv4_index_k"
    assert data["torch_cuda_arch_list"] == "9.0a"
    # MAX_JOBS derived from memory (4 GiB per job), at least 1, at most the CPU count.
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**30
    assert data["max_jobs"] == max(1, min(len(os.sched_getaffinity(0)), memory_gib // 4))
    wheels = data["wheels"]
    assert isinstance(wheels, dict)
    assert sorted(name.split("-")[0] for name in wheels) == ["dsv4_index_k", "sglang"]
    assert all(len(digest) == 64 for digest in wheels.values())
    assert not (build_lab.root / "opt/build").exists()
    # The host is in no engine group: no transfer backend's package; SGLang and the kernel imported in the release.
    assert inputs["requirements"] == []
    assert data["imports_checked"] == ["dsv4_index_k", "sglang"]


def test_release_holds_patched_fork_and_kernel(build_lab: BuildLab) -> None:
    release = build_lab.current
    assert release_python(release, "import sglang; print(sglang.__version__)") == "0.0.1"
    assert release_python(release, "import sglang.dsv4_index_k_switch as m; print(m.ENV_SWITCH)") == (
        "SGLANG_DSV4_BF16_INDEX_K"
    )
    info = json.loads(release_python(release, "import json, dsv4_index_k as m; print(json.dumps(m.build_info()))"))
    assert info["cuda_archs"] == ["90a"]
    library = Path(release_python(release, "import dsv4_index_k as m; print(m.library_path())"))
    sections = subprocess.run(["readelf", "-S", str(library)], check=True, capture_output=True, text=True).stdout
    assert ".nv_fatbin" in sections
    probe = "import dsv4_index_k as m; lib = m.load_library(); print(lib.dsv4_index_k_bf16_enabled())"
    assert release_python(release, probe) == "0"
    assert release_python(release, probe, SGLANG_DSV4_BF16_INDEX_K="1") == "1"


def test_second_run_changes_nothing(build_lab: BuildLab) -> None:
    before = build_lab.link(build_lab.current)
    run = build_lab.play()
    assert run.rc == 0, run.output[-3000:]
    assert run.changed == 0, run.output[-3000:]
    assert "exists, nothing to build" in run.output
    assert build_lab.link(build_lab.current) == before
    assert len(build_lab.switches()) == 1


def test_patch_that_does_not_apply_fails_and_keeps_current(build_lab: BuildLab) -> None:
    before, releases = build_lab.link(build_lab.current), build_lab.releases
    run = build_lab.play(sglang_build_patches=[str(FIXTURE / "ok.patch"), str(FIXTURE / "stale.patch")])
    assert run.rc != 0
    assert "Patch stale.patch" in run.output
    assert "does not apply" in run.output
    assert "current is\nunchanged" in run.output or "current is unchanged" in run.output
    assert build_lab.link(build_lab.current) == before
    assert build_lab.releases == releases
    assert len(build_lab.switches()) == 1


def test_new_ref_builds_new_release_switches_and_prunes(build_lab: BuildLab) -> None:
    first = build_lab.link(build_lab.current)
    # An old complete release and a half-written one: both go once a switch prunes
    # (keep_releases=1 keeps the newest; current and previous are always kept).
    stale = build_lab.root / "opt/releases/000000000000-stale"
    stale.mkdir()
    (stale / "manifest.json").write_text("{}")
    os.utime(stale / "manifest.json", (0, 0))
    (build_lab.root / "opt/releases/000000000000-incomplete").mkdir()

    run = build_lab.play(sglang_build_source_sha=build_lab.shas[1])
    assert run.rc == 0, run.output[-3000:]
    second = build_lab.link(build_lab.current)
    assert second != first
    assert Path(second or "").name.startswith(build_lab.shas[1][:12] + "-")
    assert build_lab.link(build_lab.previous) == first
    assert release_python(build_lab.current, "import sglang; print(sglang.__version__)") == "0.0.2"
    assert build_lab.switches() == [first, second]
    assert build_lab.releases == sorted([Path(first or "").name, Path(second or "").name])


def test_rollback_restores_previous_release(build_lab: BuildLab) -> None:
    first, second = build_lab.switches()
    run = build_lab.play(sglang_build_source_sha=build_lab.shas[1], sglang_build_rollback=True)
    assert run.rc == 0, run.output[-3000:]
    assert build_lab.link(build_lab.current) == first
    assert release_python(build_lab.current, "import sglang; print(sglang.__version__)") == "0.0.1"
    assert build_lab.switches() == [first, second, first]

    again = build_lab.play(sglang_build_source_sha=build_lab.shas[1], sglang_build_rollback=True)
    assert again.rc == 0, again.output[-3000:]
    assert again.changed == 0
    assert build_lab.link(build_lab.current) == first


def test_declared_release_returns_without_rebuild(build_lab: BuildLab) -> None:
    first, second = build_lab.switches()[:2]
    run = build_lab.play(sglang_build_source_sha=build_lab.shas[1])
    assert run.rc == 0, run.output[-3000:]
    assert "exists, nothing to build" in run.output
    assert build_lab.link(build_lab.current) == second
    assert build_lab.link(build_lab.previous) == first
