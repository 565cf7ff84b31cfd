"""A chat request carries its template: check-request counts the 16 template tokens in every check of a chat
request (length, KV pool cap, payload size, admission). Verdicts pinned to figures worked out by hand: limits typed
per case, page size 1; a body is 16 bytes per token plus 64 KiB (65,536 bytes) of overhead."""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request import Verdict, check_request
from sglang_envelope_cli.commands import main

MULTINODE = str(Path(__file__).resolve().parents[2] / "inventories" / "multinode")


def _limits(**over: int) -> Any:
    base = {
        "context_len": 1000,
        "max_req_input_len": 995,
        "max_req_len": 999,
        "max_total_num_tokens": 10_000,
        "page_size": 1,
        "max_running_requests": 1000,
    }
    return SimpleNamespace(**{**base, **over})


def _admitted(fits: int) -> Verdict:
    text = (
        f"admitted: {fits} like it run at once; the next 100 wait in the router's queue (up to "
        "queue_timeout_secs=60, then 'timed out waiting for an admission slot'); beyond that smg answers "
        "429 'admission queue is at capacity'"
    )
    return Verdict("admitted", 200, text, fits)


# 10 input tokens: a body of 10 x 16 + 65,536 = 65,696 bytes; as a chat, 10 + 16 = 26 tokens: 26 x 16 + 65,536 =
# 65,952 bytes. Admitted: 10,000 // (26 + 90) = 86 chat requests at once, 10,000 // (10 + 90) = 100 plain ones.
PLAIN_BODY, CHAT_BODY = 65_696, 65_952


@pytest.mark.parametrize(
    ("chat", "size", "verdict"),
    [
        (
            True,
            PLAIN_BODY,
            Verdict(
                "max_payload_size",
                413,
                "Request body exceeded the payload limit (max_payload_size) (a body of up to 65952 bytes against "
                "max_payload_size=65696)",
            ),
        ),
        (False, PLAIN_BODY, _admitted(100)),
        (True, CHAT_BODY, _admitted(86)),
        (
            True,
            CHAT_BODY - 1,
            Verdict(
                "max_payload_size",
                413,
                "Request body exceeded the payload limit (max_payload_size) (a body of up to 65952 bytes against "
                "max_payload_size=65951)",
            ),
        ),
    ],
    ids=["chat-at-the-plain-limit-is-413", "plain-at-its-limit", "chat-at-its-limit", "chat-one-byte-over"],
)
def test_a_chat_body_is_sized_with_its_template_tokens(chat: bool, size: int, verdict: Verdict) -> None:
    assert check_request(_limits(), {"max_payload_size": size}, 10, 90, chat=chat) == verdict


def test_a_chat_prompt_is_checked_against_max_req_input_len_with_its_template() -> None:
    # 979 + 16 = 995 reaches max_req_input_len 995 (refused at >=); 979 + 1 = 980 new tokens stay within 1,000.
    assert check_request(_limits(), {}, 979, 1, chat=True) == Verdict(
        "max_req_input_len",
        400,
        "Input length (995 tokens) exceeds the maximum allowed length (995 tokens). Use a shorter input or enable "
        "--allow-auto-truncate.",
    )
    assert check_request(_limits(), {}, 978, 1, chat=True) == _admitted(10_000 // (978 + 16 + 1))


def test_a_chat_answer_is_capped_below_its_template() -> None:
    # max_new_tokens is capped at max_req_len - prompt - 1 = 999 - (100 + 16) - 1 = 882.
    capped = Verdict(
        "kv_pool",
        200,
        "no error: the scheduler caps max_new_tokens at 882 (max_req_len 999 = min(context_len - 1, KV pool 10000 - "
        "1)), so the answer stops early",
    )
    assert check_request(_limits(), {}, 100, 883, chat=True) == capped
    assert check_request(_limits(), {}, 100, 882, chat=True) == _admitted(10_000 // (116 + 882))  # 10


def test_check_request_refuses_a_chat_prompt_at_the_context_length() -> None:
    """inventories/multinode declares context_length 524,288: a chat request of 524,272 input tokens carries
    524,272 + 16 = 524,288 prompt tokens, the whole context: SGLang's 400 before any other check."""
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["check-request", "-i", MULTINODE, "--input-tokens", "524272",
                     "--max-new-tokens", "1", "--chat"])  # fmt: skip
    assert code == 1
    assert out.getvalue() == (
        "524272 input + 1 new tokens (chat): refused by context_length (HTTP 400): The input (524288 tokens) is longer "
        "than the model's context length (524288 tokens).\n"
    )
