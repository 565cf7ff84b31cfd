"""The GPU checks of the verify suite on recorded nvidia-smi facts (no GPU needed): they pass and they fail."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import test_verify_gpu as gpu_checks
from testinfra.utils.ansible_runner import AnsibleRunner
from verify_expect import HostPlan, build_plan

PRODUCTION = Path(__file__).resolve().parents[3] / "inventories" / "production" / "hosts.yml"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"


@pytest.fixture(scope="module")
def plan() -> HostPlan:
    runner = AnsibleRunner(str(PRODUCTION))
    all_raw = {h: runner.get_variables(h) for h in runner.get_hosts("all")}
    name = runner.get_hosts("sglang_engine")[0]
    built = build_plan(name, all_raw[name], all_raw)
    # Production builds from the pinned wheel: releases are named after its sha256.
    assert built.build_sha == WHEEL_SHA256
    assert built.install == "build" and built.gpu_ids == {"prefill": [0, 1, 2, 3], "decode": [4, 5, 6, 7]}
    return built


def h200_host(plan: HostPlan) -> dict[str, Any]:
    """What the snapshot reports on a healthy 8 x H200 host with a built release."""
    release = f"{plan.releases_dir}/{WHEEL_SHA256[:12]}-abcdef012345"
    return {
        "gpu": {
            "present": True,
            "nvidia_smi_rc": 0,
            "gpus": [{"index": i, "memory_mib": 143771.0, "compute_cap": "9.0", "name": "H200"} for i in range(8)],
            "release": {
                "link": plan.current_link,
                "target": release,
                "manifest": {"release": release.rsplit("/", 1)[-1]},
                "kernel_build_info": {"cuda_archs": ["90a", "100a", "120a"], "nvcc_version": "V13.0.88"},
            },
        }
    }


def check_all(plan: HostPlan, snap: dict[str, Any]) -> list[str]:
    failed = []
    for role in ("prefill", "decode"):
        try:
            gpu_checks.test_declared_gpus(plan, plan.servers[role], snap)
        except AssertionError as exc:
            failed.append(f"{role}: {exc}")
    try:
        gpu_checks.test_kernel_release(plan, snap)
    except AssertionError as exc:
        failed.append(f"release: {exc}")
    return failed


def test_healthy_gpu_host_passes(plan: HostPlan) -> None:
    assert check_all(plan, h200_host(plan)) == []


def test_missing_gpu_fails(plan: HostPlan) -> None:
    snap = h200_host(plan)
    snap["gpu"]["gpus"] = snap["gpu"]["gpus"][:6]
    failed = check_all(plan, snap)
    assert len(failed) == 1 and failed[0].startswith("decode: GPU ids [6, 7] declared"), failed


def test_wrong_memory_fails(plan: HostPlan) -> None:
    snap = h200_host(plan)
    for g in snap["gpu"]["gpus"]:
        g["memory_mib"] = 81559.0  # an 80 GB H100
    failed = check_all(plan, snap)
    assert [f.split(":")[0] for f in failed] == ["prefill", "decode"], failed


def test_kernel_not_built_for_the_gpu_fails(plan: HostPlan) -> None:
    snap = h200_host(plan)
    snap["gpu"]["release"]["kernel_build_info"]["cuda_archs"] = ["100a", "120a"]
    failed = check_all(plan, snap)
    assert len(failed) == 1, failed
    assert failed[0].startswith("release: kernel built for ['100a', '120a'], the GPUs need compute capability ['90']")


def test_release_from_another_commit_fails(plan: HostPlan) -> None:
    snap = copy.deepcopy(h200_host(plan))
    snap["gpu"]["release"]["target"] = f"{plan.releases_dir}/fedcba987654-abcdef012345"
    failed = check_all(plan, snap)
    assert len(failed) == 1 and "is not built from" in failed[0], failed


def test_no_gpu_skips_saying_so(plan: HostPlan) -> None:
    with pytest.raises(pytest.skip.Exception, match="has no /dev/nvidia0: GPU checks run only on GPU hosts"):
        gpu_checks.test_kernel_release(plan, {"gpu": {"present": False}})
