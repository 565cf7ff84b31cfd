"""The request-shape checker: the first limit that rejects a request, with SGLang's or smg's text, in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import requests_that_fit, resolve_engine
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request import check_request, length_error
from sglang_envelope_cli.commands import main

REPO = Path(__file__).resolve().parents[2]
CONFIG = json.loads((REPO / "models" / "deepseek-v4-flash" / "config.json").read_text())
ENVELOPE = {"context_length": 131072, "tp_size": 4, "page_size": 256, "max_running_requests": 64}
ROUTER: dict[str, Any] = {"max_payload_size": 536870912, "max_concurrent_requests": 64, "queue_size": 256}


@pytest.fixture
def limits() -> Any:
    return resolve_engine(CONFIG, ENVELOPE, 141.0, params_b=284, quantization="mxfp4")


def test_input_at_context_length_is_refused_with_sglang_text(limits: Any) -> None:
    v = check_request(limits, ROUTER, 131072, 1)
    assert (v.limit, v.status) == ("context_length", 400)
    assert v.text == "The input (131072 tokens) is longer than the model's context length (131072 tokens)."


def test_input_plus_new_tokens_above_context(limits: Any) -> None:
    v = check_request(limits, ROUTER, 130000, 2000)
    assert v.limit == "context_length"
    assert "You requested a total of 132000 tokens: 130000 tokens from the input messages and 2000" in v.text


def test_max_req_input_len_comes_next() -> None:
    v = length_error(1000, 990, 995, 1)
    assert v is not None and v.limit == "max_req_input_len"
    assert v.text.startswith("Input length (995 tokens) exceeds the maximum allowed length (990 tokens).")


def test_payload_too_small_is_smg_413(limits: Any) -> None:
    v = check_request(limits, {**ROUTER, "max_payload_size": 100000}, 50000, 100)
    assert (v.limit, v.status) == ("max_payload_size", 413)
    assert v.text.startswith("Request body exceeded the payload limit (max_payload_size)")


def test_chat_template_tokens_count(limits: Any) -> None:
    assert check_request(limits, ROUTER, 131060, 0).limit != "context_length"
    assert check_request(limits, ROUTER, 131060, 0, chat=True).limit == "context_length"


def test_admitted_counts_what_the_capacity_model_fits(limits: Any) -> None:
    v = check_request(limits, ROUTER, 100000, 20000)
    expected = min(requests_that_fit(limits.max_total_num_tokens, 120000, limits.page_size), 64)
    assert (v.limit, v.fits_at_once) == ("admitted", expected)
    assert check_request(limits, {**ROUTER, "max_concurrent_requests": 3}, 1000, 10).fits_at_once == 3


def test_cli_names_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "check-request",
            "-i",
            str(REPO / "inventories/production"),
            "--input-tokens",
            "600000",
            "--max-new-tokens",
            "10",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 1 and "refused by context_length (HTTP 400)" in out
    assert "The input (600000 tokens) is longer than the model's context length (524288 tokens)." in out
