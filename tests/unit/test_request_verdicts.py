"""One request shape against one engine's limits and the router's: each check at its boundary, with the exact
verdict (limits typed for each rule; page size 1 unless the rule is about pages)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request import Verdict, check_request, length_error
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_router_rules import payload_bytes


def _limits(**over: int) -> Any:
    base = {
        "context_len": 1000,
        "max_req_input_len": 995,
        "max_req_len": 999,
        "max_total_num_tokens": 10_000,
        "page_size": 1,
        "max_running_requests": 64,
    }
    return SimpleNamespace(**{**base, **over})


def _over_context(total: int, prompt: int, new: int) -> str:
    return (
        f"Requested token count exceeds the model's maximum context length of 1000 tokens. You requested a total of "
        f"{total} tokens: {prompt} tokens from the input messages and {new} tokens for the completion. Please reduce "
        "the number of tokens in the input messages or the completion to fit within the limit."
    )


@pytest.mark.parametrize(
    ("input_tokens", "new", "verdict"),
    [
        (
            1000,
            None,
            Verdict("context_length", 400, "The input (1000 tokens) is longer than the model's context length "
                    "(1000 tokens)."),
        ),
        (900, 101, Verdict("context_length", 400, _over_context(1001, 900, 101))),
        (900, 100, None),
        (995, None, Verdict(
            "max_req_input_len",
            400,
            "Input length (995 tokens) exceeds the maximum allowed length (995 tokens). Use a shorter input or enable "
            "--allow-auto-truncate.",
        )),
        (994, None, None),
    ],
    ids=["input-at-context", "total-over-context", "total-at-context", "input-at-max-input", "input-below"],
)  # fmt: skip
def test_length_checks_at_their_boundaries(input_tokens: int, new: int | None, verdict: Verdict | None) -> None:
    assert length_error(1000, 995, input_tokens, new) == verdict


def _admitted(fits: int, queue: int | str = 100, timeout: int | str = 60) -> Verdict:
    text = (
        f"admitted: {fits} like it run at once; the next {queue} wait in the router's queue (up to "
        f"queue_timeout_secs={timeout}, then 'timed out waiting for an admission slot'); beyond that smg answers "
        "429 'admission queue is at capacity'"
    )
    return Verdict("admitted", 200, text, fits)


def _capped(cap: int, max_req_len: int = 999, pool: int = 10_000) -> Verdict:
    return Verdict(
        "kv_pool",
        200,
        f"no error: the scheduler caps max_new_tokens at {cap} (max_req_len {max_req_len} = min(context_len - 1, "
        f"KV pool {pool} - 1)), so the answer stops early",
    )


FULL = Verdict(
    "admission", 429, "admission queue is at capacity (smg admission_queue_full): no such request fits the KV pool"
)


@pytest.mark.parametrize(
    ("limits", "router", "shape", "verdict"),
    [
        (_limits(), {}, (100, 898), _admitted(10)),
        (_limits(), {}, (100, 899), _capped(898)),
        (_limits(max_req_len=101, max_req_input_len=150, context_len=200), {}, (100, 1), _capped(0, 101)),
        (_limits(), {}, (10, 90), _admitted(64)),
        (_limits(max_running_requests=1000), {}, (10, 90), _admitted(100)),
        (_limits(max_running_requests=1000), {}, (60, 40), _admitted(100)),
        (_limits(max_running_requests=1000, page_size=64), {}, (10, 90), _admitted(78)),
        (_limits(), {"max_concurrent_requests": 0}, (10, 90), _admitted(64)),
        (_limits(), {"max_concurrent_requests": -1}, (10, 90), _admitted(64)),
        (_limits(), {"max_concurrent_requests": 1}, (10, 90), _admitted(1)),
        (_limits(), {"max_concurrent_requests": 5}, (10, 90), _admitted(5)),
        (_limits(max_total_num_tokens=100), {}, (10, 90), _admitted(1)),
        (_limits(max_total_num_tokens=99, max_req_len=98, page_size=64), {}, (10, 87), FULL),
        (_limits(), {"queue_size": 0, "queue_timeout_secs": 5}, (10, 90), _admitted(64, 0, 5)),
        (_limits(), {"queue_size": 7}, (10, 90), _admitted(64, 7)),
    ],
    ids=[
        "admitted", "capped-at-the-pool", "cap-cannot-go-below-zero", "running-limit-binds", "pool-binds",
        "input-and-output-both-count", "pages-round-up", "router-cap-0-is-none", "router-cap-minus-1-is-none",
        "router-cap-1", "router-cap-binds", "exactly-one-fits", "none-fits", "queue-declared", "queue-size-only",
    ],
)  # fmt: skip
def test_request_verdicts(limits: Any, router: dict[str, Any], shape: tuple[int, int], verdict: Verdict) -> None:
    assert check_request(limits, router, *shape) == verdict


def test_chat_requests_carry_the_template_tokens() -> None:
    # 16 template tokens: 984 + 16 = 1000 reaches the context length.
    assert check_request(_limits(), {}, 984, 1, chat=True).limit == "context_length"
    assert check_request(_limits(), {}, 984, 1).limit == "admitted"


def test_decode_engines_share_the_router() -> None:
    assert check_request(_limits(), {}, 10, 90, decode_engines=3) == _admitted(192)
    assert check_request(_limits(), {"max_concurrent_requests": 100}, 10, 90, decode_engines=3) == _admitted(100)
    assert check_request(_limits(), {}, 10, 90, decode_engines=0) == _admitted(64)


@pytest.mark.parametrize(("size_over", "limit"), [(0, "admitted"), (-1, "max_payload_size")])
def test_the_payload_limit_is_inclusive(size_over: int, limit: str) -> None:
    body = payload_bytes(10)
    verdict = check_request(_limits(), {"max_payload_size": body + size_over}, 10, 90)
    assert verdict.limit == limit
    if limit == "max_payload_size":
        assert verdict == Verdict(
            "max_payload_size",
            413,
            f"Request body exceeded the payload limit (max_payload_size) (a body of up to {body} bytes against "
            f"max_payload_size={body - 1})",
        )
