"""GPU checks: run only where /dev/nvidia0 exists (GPU hosts); skipped elsewhere with a reason saying so."""

from __future__ import annotations

from typing import Any

import pytest
from verify_expect import ENGINE_ROLES, HostPlan, Server


def _gpu(plan: HostPlan, snapshot: dict[str, Any]) -> dict[str, Any]:
    gpu = snapshot.get("gpu") or {}
    if not gpu.get("present"):
        pytest.skip(f"{plan.name} has no /dev/nvidia0: GPU checks run only on GPU hosts")
    assert gpu.get("nvidia_smi_rc") == 0, f"nvidia-smi failed: {gpu.get('nvidia_smi_error')}"
    return gpu


@pytest.mark.parametrize("role", ENGINE_ROLES)
def test_declared_gpus(plan: HostPlan, server: Server, snapshot: dict[str, Any]) -> None:
    """Every GPU id the engine declares exists, with the declared memory per GPU."""
    gpu = _gpu(plan, snapshot)
    by_index = {g["index"]: g for g in gpu["gpus"]}
    ids = plan.gpu_ids.get(server.role) or []
    assert ids, f"{server.role}: no gpu_ids declared"
    missing = [i for i in ids if i not in by_index]
    assert not missing, f"GPU ids {missing} declared for {server.role}, nvidia-smi lists {sorted(by_index)}"
    if plan.gpu_memory_gib:
        tolerance = float(plan.settings["sglang_verify_gpu_memory_tolerance"])
        off = [
            f"GPU {i}: {by_index[i]['memory_mib'] / 1024:.1f} GiB"
            for i in ids
            if abs(by_index[i]["memory_mib"] / 1024 - plan.gpu_memory_gib) > tolerance * plan.gpu_memory_gib
        ]
        assert not off, f"declared sglang_gpu_memory_gib={plan.gpu_memory_gib}: " + ", ".join(off)


def test_kernel_release(plan: HostPlan, snapshot: dict[str, Any]) -> None:
    """The current release is the built one and its index-key kernel covers these GPUs' architectures."""
    if not any(r in plan.servers for r in ENGINE_ROLES):
        pytest.skip(f"{plan.name} runs no engine")
    gpu = _gpu(plan, snapshot)
    if plan.install != "build":
        pytest.skip(f"sglang_engine_install={plan.install}: no built kernel release to check")
    release = gpu.get("release") or {}
    target = release.get("target")
    assert target, f"{release.get('link')} does not exist"
    assert target.startswith(plan.releases_dir.rstrip("/") + "/"), f"{release['link']} -> {target}, not a built release"
    name = target.rstrip("/").rsplit("/", 1)[-1]
    if plan.build_sha:
        assert name.startswith(plan.build_sha[:12]), f"current release {name} is not built from {plan.build_sha}"
    assert "manifest" in release, f"{target}: {release.get('manifest_error', 'no manifest.json')}"
    info = release.get("kernel_build_info")
    assert info, f"{target}: the dsv4_index_k kernel package is not installed in the release venv"
    archs = [str(a) for a in info.get("cuda_archs") or []]
    caps = {g["compute_cap"].replace(".", "") for g in gpu["gpus"]}
    uncovered = sorted(c for c in caps if not any(a.rstrip("af") == c for a in archs))
    assert not uncovered, f"kernel built for {archs}, the GPUs need compute capability {uncovered}"
