"""The simulator's long-context recall model, and the verify suite's recall probe against it.

With fp8 index keys (SGLANG_DSV4_BF16_INDEX_K unset or 0) the simulated DeepSeek-V4 misses needles more than
2,000 tokens before the question, so the probe must fail; with bf16 keys it finds them all and the probe passes.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from sglang_sim import recall
from simtools import REPO, Launcher, Sim

sys.path.insert(0, str(REPO / "verify/probes"))
import recall_probe

FAST = {"SGLANG_SIM_TOKENS_PER_SEC": "5000", "SGLANG_SIM_TTFT_MS": "1", "SGLANG_SIM_STEP_MS": "1"}


def words_with(back: int) -> list[str]:
    """A prompt whose needle value sits exactly `back` tokens before the question."""
    head = "the secret key for alpha is 4711 .".split()
    filler = ["word"] * (back - 2)
    return [*head[:-1], *filler, "what", "secret", "key", "for", "alpha?"]


@pytest.mark.parametrize("bf16", [False, True])
def test_recall_model_boundary(bf16: bool) -> None:
    assert recall.answer(words_with(recall.FP8_RECALL_TOKENS), bf16) == "4711"
    assert recall.answer(words_with(recall.FP8_RECALL_TOKENS + 1), bf16) == ("4711" if bf16 else None)
    assert recall.answer(words_with(50_000), bf16) == ("4711" if bf16 else None)


def test_recall_model_reads_only_needles_before_the_question() -> None:
    words = "what is the secret key for alpha? the secret key for alpha is 1.".split()
    assert recall.answer(words, True) is None
    two = "the secret key for alpha is 1. the secret key for alpha is 2. the secret key for alpha?".split()
    assert recall.answer(two, True) == "2"
    assert recall.answer("the secret key for beta is 3. the secret key for alpha?".split(), True) is None
    assert recall.answer("no question here".split(), True) is None


@pytest.mark.parametrize(("value", "bf16"), [("1", True), ("TRUE", True), ("true", True), ("0", False), ("", False)])
def test_switch_reads_like_the_patched_sglang(value: str, bf16: bool) -> None:
    assert recall.bf16_index_k_switch({"SGLANG_DSV4_BF16_INDEX_K": value}) is bf16


@pytest.fixture(scope="module")
def engines(launcher: Launcher) -> dict[str, Sim]:
    return {
        "fp8": launcher.sim(env={**FAST, "SGLANG_DSV4_BF16_INDEX_K": "0"}),
        "bf16": launcher.sim(env={**FAST, "SGLANG_DSV4_BF16_INDEX_K": "true"}),
    }


@pytest.mark.parametrize("dtype", ["fp8", "bf16"])
def test_server_info_reports_the_index_k_dtype(engines: dict[str, Sim], dtype: str) -> None:
    info = httpx.get(engines[dtype].url + "/server_info", timeout=10).json()
    assert [s["dsv4_index_k_dtype"] for s in info["internal_states"]] == [dtype] * len(info["internal_states"])


def test_generate_answers_with_the_needle(engines: dict[str, Sim]) -> None:
    text = "the secret key for alpha is 4711. " + "filler " * 3000 + "what is the secret key for alpha?"
    body = {"text": text, "sampling_params": {"max_new_tokens": 4}}
    bf16 = httpx.post(engines["bf16"].url + "/generate", json=body, timeout=30).json()
    fp8 = httpx.post(engines["fp8"].url + "/generate", json=body, timeout=30).json()
    assert bf16["text"].split()[0] == "4711" and len(bf16["output_ids"]) == 4
    assert "4711" not in fp8["text"] and len(fp8["output_ids"]) == 4


@pytest.mark.parametrize("route", ["chat", "generate"])
def test_recall_probe_fails_on_fp8_keys(engines: dict[str, Sim], route: str) -> None:
    result = recall_probe.run_recall(engines["fp8"].url, route=route, max_new_tokens=8)
    assert result["passed"] is False
    cases = result["cases"]
    assert len(cases) == len(recall_probe.LENGTHS) * len(recall_probe.DEPTHS)
    assert all(c["status"] == 200 for c in cases), cases
    # Exactly the needles within 2,000 tokens of the question come back.
    for case in cases:
        assert case["found"] is (case["needle_tokens_back"] < recall.FP8_RECALL_TOKENS), case
    assert {c["length"] for c in cases if not c["found"]} == set(recall_probe.LENGTHS)
    missed = recall_probe.failures(result)
    assert len(missed) == sum(not c["found"] for c in cases) and "22600 tokens, depth 0.9" in " ".join(missed)


@pytest.mark.parametrize("route", ["chat", "generate"])
def test_recall_probe_passes_on_bf16_keys(engines: dict[str, Sim], route: str) -> None:
    result = recall_probe.run_recall(engines["bf16"].url, route=route, max_new_tokens=8)
    assert result["passed"] is True, recall_probe.failures(result)
    assert recall_probe.failures(result) == []
    # The prompts have the lengths asked for, in the server's own token count.
    for case in result["cases"]:
        assert abs(case["prompt_tokens"] - case["length"]) <= 0.01 * case["length"] + 40, case


def test_recall_probe_program_prints_json(engines: dict[str, Sim]) -> None:
    """The program the verify suite ships to the router host: config in, JSON out, exit 0."""
    config = {"url": engines["bf16"].url, "route": "generate", "lengths": [4500], "depths": [0.1]}
    probe = REPO / "verify/probes/recall_probe.py"
    proc = subprocess.run([sys.executable, str(probe), json.dumps(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["passed"] is True and len(out["cases"]) == 1
    bad = subprocess.run([sys.executable, str(probe), "{}"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and "bad config" in bad.stdout
