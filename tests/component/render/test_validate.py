"""Bad declared envelopes stop site.yml on the controller, before any host is touched, with a message
that names the variable, the value and the fix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from deploytools import envelope, playbook

BASE = envelope()
# These cases test the project's own rules; SGLang's and smg's checks have their own
# (tests/component/contract/test_deep_check.py).
OUR_RULES_ONLY = ("-e", "sglang_validate_deep_check=false")


def _with(var: str, **changes: Any) -> dict[str, Any]:
    """The override of one top-level variable: its shared value with `changes` applied (None deletes a key)."""
    value = {**BASE[var], **changes}
    return {var: {k: v for k, v in value.items() if v is not None}}


# (id, overrides, fragments the error must contain: the variable, the value or rule, and the fix)
CASES: list[tuple[str, dict[str, Any], list[str]]] = [
    (
        "gpu-sets-overlap",
        _with("sglang_decode", gpu_ids=[2, 3, 4, 5]),
        ["sglang_decode.gpu_ids=[2, 3, 4, 5]", "GPU 2 is already used by sglang_prefill", "fix: give each engine"],
    ),
    (
        "tp-not-gpu-count",
        _with("sglang_prefill", tp_size=2),
        ["sglang_prefill.gpu_ids=[0, 1, 2, 3]", "tp_size=2 needs exactly 2 GPUs", "fix: list 2 GPU ids"],
    ),
    (
        "port-collision",
        _with("sglang_decode", port=30000),
        ["sglang_decode.port=30000", "port already used by sglang_prefill.port", "fix: give each server"],
    ),
    (
        "context-above-model-max",
        _with("sglang_engine_common", context_length=2097152),
        ["context_length=2097152", "above the model's maximum 1048576", "fix: lower it to <= 1048576"],
    ),
    (
        "context-above-kv-pool",
        _with("sglang_prefill", mem_fraction_static=0.29),
        ["sglang_engine_common.context_length=524288", "above the KV pool", "fix: lower context_length or raise"],
    ),
    (
        "max-total-tokens-below-one-request",
        _with("sglang_decode", max_total_tokens=100000),
        ["sglang_decode.max_total_tokens=100000", "below one full-length request", "fix: raise it to >= 524288"],
    ),
    (
        "fraction-outside-0-1",
        _with("sglang_decode", mem_fraction_static=1.2),
        ["sglang_decode.mem_fraction_static=1.2", "must be in (0, 1)", "fix: use e.g."],
    ),
    (
        "chunk-above-max-prefill",
        _with("sglang_engine_common", chunked_prefill_size=32768),
        ["chunked_prefill_size=32768", "larger than max_prefill_tokens=16384", "fix: lower it to <= 16384"],
    ),
    (
        "page-size-not-256",
        _with("sglang_engine_common", page_size=64),
        ["page_size=64", "SGLang forces 256 for DeepSeek-V4", "fix: declare 256"],
    ),
    (
        "max-queued-requests-in-pd",
        _with("sglang_decode", max_queued_requests=256),
        [
            "sglang_decode.max_queued_requests=256",
            "ignores --max-queued-requests in PD mode",
            "sglang_router.queue_size",
        ],
    ),
    (
        "router-above-decode-capacity",
        _with("sglang_router", max_concurrent_requests=100000),
        ["sglang_router.max_concurrent_requests=100000", "above what the decode fleet runs at once (64)", "fix:"],
    ),
    (
        "removed-flag-cuda-graph-max-bs",
        _with("sglang_decode", cuda_graph_max_bs=64),
        ["sglang_decode.cuda_graph_max_bs", "SGLang 0.5.23 removed", "fix: use cuda_graph_max_bs_decode"],
    ),
    (
        "removed-flag-nsa-prefill-backend",
        _with("sglang_prefill", nsa_prefill_backend="flashmla_sparse"),
        ["sglang_prefill.nsa_prefill_backend", "SGLang 0.5.23 removed", "fix: use dsa_prefill_backend"],
    ),
    (
        "unknown-key-typo",
        {"sglang_engine_common": {**BASE["sglang_engine_common"], "context_lenght": 131072}},
        ["sglang_engine_common.context_lenght", "did you mean context_length", "fix: remove it"],
    ),
    (
        "wrong-type-of-inventory-variable",
        {"sglang_gpu_memory_gib": "lots"},
        ["lab1: sglang_gpu_memory_gib='lots'", "unable to convert to float", "fix: declare a float"],
    ),
]


def _assert_stopped_before_hosts(run_output: str, recap: dict[str, dict[str, int]]) -> None:
    assert "lab1" not in recap, f"a host play ran (recap {recap})"
    assert recap.get("localhost", {}).get("failed") == 1, f"the validation play did not fail (recap {recap})"
    assert "PLAY [Deploy the SGLang engines]" not in run_output, "the engine play started"
    assert "The declared envelope has problems; no host was touched" in run_output


@pytest.mark.parametrize(("overrides", "fragments"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_envelope_stops_before_any_host(
    bad_inventory: Callable[[dict[str, Any]], Path], overrides: dict[str, Any], fragments: list[str]
) -> None:
    run = playbook("-i", str(bad_inventory(overrides)), "site.yml", *OUR_RULES_ONLY, timeout=300)
    assert run.returncode != 0, run.output[-3000:]
    _assert_stopped_before_hosts(run.output, run.recap())
    for fragment in fragments:
        assert fragment in run.output, f"{fragment!r} missing from the error:\n{run.output[-3000:]}"


def test_every_problem_is_reported_at_once(bad_inventory: Callable[[dict[str, Any]], Path]) -> None:
    overrides = {
        **_with("sglang_decode", mem_fraction_static=1.2, port=30000),
        **_with("sglang_router", max_concurrent_requests=100000),
    }
    run = playbook("-i", str(bad_inventory(overrides)), "site.yml", *OUR_RULES_ONLY, timeout=300)
    assert run.returncode != 0
    _assert_stopped_before_hosts(run.output, run.recap())
    for fragment in ("sglang_decode.mem_fraction_static=1.2", "sglang_decode.port=30000"):
        assert fragment in run.output, run.output[-3000:]


def test_the_shared_envelope_passes(bad_inventory: Callable[[dict[str, Any]], Path]) -> None:
    """Control case: the unchanged envelope passes validation and only then the engine play tries lab1
    (unreachable here), so the failures above come from the bad values, and contact would show in the recap."""
    run = playbook("-i", str(bad_inventory({})), "site.yml", timeout=300)
    assert "KV pool" in run.output, run.output[-3000:]
    assert "rollout plan (one server at a time)" in run.output, run.output[-3000:]
    assert "PLAY [Deploy the SGLang engines]" in run.output
    assert run.recap().get("localhost", {}).get("failed") == 0, run.recap()
    assert run.recap().get("lab1", {}).get("unreachable") == 1, run.recap()


def test_a_rollout_below_the_declared_minimum_stops_before_any_host(
    bad_inventory: Callable[[dict[str, Any]], Path],
) -> None:
    """One decode engine: its restart is an outage, which a declared minimum of parallel calls refuses."""
    run = playbook(
        "-i", str(bad_inventory({})), "site.yml", *OUR_RULES_ONLY, "-e", "sglang_validate_rollout_min_parallel=1",
        timeout=300,
    )  # fmt: skip
    assert run.returncode != 0, run.output[-3000:]
    assert "lab1" not in run.recap(), run.recap()
    assert "The rollout cannot keep the declared capacity; no host was touched" in run.output, run.output[-3000:]
    for fragment in (
        "decode on lab1: while it restarts the rest of the fleet carries nothing (an outage)",
        "below sglang_validate_rollout_min_parallel=1",
        "Fix: add a decode host",
    ):
        assert fragment in run.output, run.output[-3000:]
