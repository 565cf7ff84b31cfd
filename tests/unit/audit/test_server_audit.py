"""One server read by plugins/modules/sglang_live_info.py and judged by sglang_drift.judge, as the audit does it,
against SGLang bodies made by its own code and synthetic smg bodies (cases: the .yaml)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import infer_index_k
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Reply, TransportError
from audit_helpers import (
    SECRET,
    FixtureTransport,
    audit_server,
    fixture_body,
    load_cases,
    load_library,
    model_inputs,
    run_module,
    subset,
)

CASES = Path(__file__).with_suffix(".yaml")
live_info = load_library("sglang_live_info")


@pytest.mark.parametrize("case", load_cases(CASES))
def test_case(case: dict[str, Any]) -> None:
    args = dict(case["input"])
    if case.get("model"):
        args["model"] = model_inputs(case["model"])
    transport = FixtureTransport(case["http"], case.get("require_key"))
    result = audit_server(args, transport)

    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    problems = list(subset(case.get("output", {}), result))
    assert not problems, "\n".join(problems)
    got = [(d["key"], d["layer"], d["severity"]) for d in result["drift"]]
    want = [(d["key"], d["layer"], d.get("severity", "drift")) for d in case["drift"]]
    assert sorted(got) == sorted(want), json.dumps(result["drift"], indent=1)
    for expected in case["drift"]:
        item = next(d for d in result["drift"] if (d["key"], d["layer"]) == (expected["key"], expected["layer"]))
        assert expected["explains"] in item["explanation"], item
        if "layers" in expected:
            assert item["layers"] == expected["layers"], item
    for phrase in case.get("errors", []):
        assert any(phrase in e for e in result["errors"]), (phrase, result["errors"])
    for phrase in case.get("warnings", []):
        assert any(phrase in w for w in result["warnings_seen"]), (phrase, result["warnings_seen"])
    assert SECRET not in json.dumps(result), "the API key leaked into the result"


def test_rows_mark_the_drifting_cells() -> None:
    table = {
        "/server_info": {"fixture": "server_info_decode.json"},
        "/v1/models": {"fixture": "models.json", "patch": {"data.0.max_model_len": 65536}},
        "/v1/loads": {"fixture": "loads_decode.json"},
    }
    declared = {"context_length": 131072, "max_running_requests": 64, "disaggregation_mode": "decode"}
    result = audit_server(
        {"endpoint": "http://127.0.0.1:30001", "role": "decode", "declared": declared, "metrics": False},
        FixtureTransport(table),
    )
    rows = {r["key"]: r for r in result["rows"]}
    assert rows["context_length"]["marks"] == {"effective": "drift"}
    assert rows["context_length"]["values"] == {"declared": 131072, "effective": 65536}
    assert rows["max_running_requests"]["marks"] == {}
    assert rows["max_total_tokens"]["limit"] is True


def test_api_key_is_read_from_the_env_file_on_the_host(tmp_path: Path) -> None:
    env = tmp_path / "dsv4-decode.env"
    env.write_text(f'SGLANG_DSV4_BF16_INDEX_K=1\nSGLANG_API_KEY="{SECRET}"\n')
    transport = FixtureTransport(
        {"/server_info": {"fixture": "server_info_decode.json"}, "/v1/models": {"fixture": "models.json"}},
        require_key=SECRET,
    )
    args = {"endpoint": "http://127.0.0.1:30001", "role": "decode", "api_key_env_file": str(env), "metrics": False}
    result = run_module(live_info, args, transport)
    assert result["status"] == "ok"  # /v1/loads answers 404 here: a warning only
    assert result["live"]["context_length"] == 131072
    assert not any("unauthorized" in e for e in result["errors"])
    assert SECRET not in json.dumps(result)


class BarrierTransport:
    """Answers only when `parties` requests are in flight at once: proves the endpoints are fetched concurrently."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=5)
        self.inner = FixtureTransport(
            {
                "/server_info": {"fixture": "server_info_decode.json"},
                "/v1/models": {"fixture": "models.json"},
                "/v1/loads": {"fixture": "loads_decode.json"},
                "/metrics": {"fixture": "metrics_decode.txt"},
            }
        )

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        try:
            self.barrier.wait()
        except threading.BrokenBarrierError:
            raise TransportError("timeout", "requests were not concurrent") from None
        return self.inner.get(url, headers, timeout)


def test_endpoints_of_one_engine_are_fetched_concurrently() -> None:
    result = run_module(live_info, {"endpoint": "http://127.0.0.1:30001", "role": "decode"}, BarrierTransport(4))
    assert result["status"] == "ok", result["errors"]


def test_fixture_holds_the_secret_the_tests_look_for() -> None:
    """Guard: the leak check above is only meaningful if the body SGLang built carries the key in plaintext."""
    body = fixture_body("server_info_decode.json")
    assert body["api_key"] == SECRET and SECRET in body["launch_command"]


def test_index_k_inference_states_its_rule() -> None:
    predicted = {"pool_by_index_k": {"bf16": 11_159_040, "fp8": 12_184_320}}
    inferred = infer_index_k(12_180_000, predicted)
    assert inferred is not None and inferred[0] is False
    assert "12,180,000 tokens" in inferred[1] and "11,159,040 with bf16" in inferred[1] and "fp8 figure" in inferred[1]
    assert infer_index_k(11_200_000, predicted) == (True, infer_index_k(11_200_000, predicted)[1])
    assert infer_index_k(11_671_680, predicted) is None  # the midpoint: nearer neither
    assert infer_index_k(9_000_000, predicted) is None  # far from both
    assert infer_index_k(11_159_040, {}) is None  # no DeepSeek-V4 prediction
