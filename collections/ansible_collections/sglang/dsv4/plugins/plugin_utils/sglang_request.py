"""Would a request of this shape be served? The limits SGLang 0.5.23 and smg 1.13.0 apply to one request, in
the order they apply them, each with the exact text the server answers; the simulator applies the same checks.

Order: per-call context (TokenizerManager._validate_one_request), max_req_input_len (the scheduler's
validate_input_length), the KV pool (the scheduler caps max_new_tokens at max_req_len - input - 1), the router's
max_payload_size, then admission (how many such requests run at once, how many wait in smg's queue).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .sglang_fleet import Engine, answer
from .sglang_router_rules import payload_bytes

# Chat requests carry a template around the prompt; the rendered template adds a few tokens per message.
CHAT_TEMPLATE_TOKENS = 16
# SGLang's length checks, in the order it applies them.
LENGTH_LIMITS = ("context_length", "max_req_input_len")


@dataclass(frozen=True)
class Verdict:
    limit: str  # context_length | max_req_input_len | kv_pool | max_payload_size | admission | admitted
    status: int  # HTTP status the caller gets (200 when admitted)
    text: str  # the server's own error text, or what happens
    fits_at_once: int = 0


def length_error(
    context_len: int, max_req_input_len: int, input_tokens: int, max_new_tokens: int | None
) -> Verdict | None:
    """SGLang 0.5.23's length checks of one request (no auto-truncate, no speculative reserve): the first
    that rejects it, with SGLang's text, or None."""
    if input_tokens >= context_len:
        return Verdict(
            "context_length",
            400,
            f"The input ({input_tokens} tokens) is longer than the model's context length ({context_len} tokens).",
        )
    if max_new_tokens is not None and max_new_tokens + input_tokens > context_len:
        return Verdict(
            "context_length",
            400,
            "Requested token count exceeds the model's maximum context length "
            f"of {context_len} tokens. You requested a total of {max_new_tokens + input_tokens} "
            f"tokens: {input_tokens} tokens from the input messages and "
            f"{max_new_tokens} tokens for the completion. Please reduce the number "
            "of tokens in the input messages or the completion to fit within the limit.",
        )
    if input_tokens >= max_req_input_len:
        return Verdict(
            "max_req_input_len",
            400,
            f"Input length ({input_tokens} tokens) exceeds the maximum allowed length "
            f"({max_req_input_len} tokens). Use a shorter input or enable --allow-auto-truncate.",
        )
    return None


def check_request(
    limits: Any,
    router: Mapping[str, Any],
    input_tokens: int,
    max_new_tokens: int,
    chat: bool = False,
    decode_engines: int = 1,
    engines: Sequence[Engine] | None = None,
) -> Verdict:
    """The verdict for one request shape against the engines' limits (capacity model EngineLimits: one engine's, or a
    sequence of every engine's, prefill and decode) and the router envelope. smg may send the call to any prefill and
    any decode engine, so the length checks are the tightest engine's: the first check any engine refuses it by,
    with the text of the engine that refuses it by the smallest limit (the first given among equals). Admission is
    the fleet answer over `engines` (sglang_fleet), else over `decode_engines` engines like the one with the smallest
    max_req_len."""
    every = list(limits) if isinstance(limits, Sequence) else [limits]
    prompt = input_tokens + (CHAT_TEMPLATE_TOKENS if chat else 0)
    refusals = []
    for one in every:
        error = length_error(one.context_len, one.max_req_input_len, prompt, max_new_tokens)
        if error:
            bound = one.context_len if error.limit == "context_length" else one.max_req_input_len
            refusals.append((LENGTH_LIMITS.index(error.limit), bound, error))
    if refusals:
        return min(refusals, key=lambda r: r[:2])[2]
    tightest = min(every, key=lambda one: int(one.max_req_len))
    cap = max(0, tightest.max_req_len - prompt - 1)
    if max_new_tokens > cap:
        return Verdict(
            "kv_pool",
            200,
            f"no error: the scheduler caps max_new_tokens at {cap} (max_req_len {tightest.max_req_len} = "
            f"min(context_len - 1, KV pool {tightest.max_total_num_tokens} - 1)), so the answer stops early",
        )
    size = router.get("max_payload_size")
    body = payload_bytes(prompt)
    if size is not None and body > int(size):
        return Verdict(
            "max_payload_size",
            413,
            f"Request body exceeded the payload limit (max_payload_size) (a body of up to {body} bytes "
            f"against max_payload_size={size})",
        )
    fleet = list(engines or [Engine.from_limits("decode", "decode", tightest)] * max(1, decode_engines))
    fits = answer(fleet, [router], prompt + max_new_tokens).memory.parallel
    if fits < 1:
        return Verdict(
            "admission",
            429,
            "admission queue is at capacity (smg admission_queue_full): no such request fits the KV pool",
        )
    queue = router.get("queue_size")
    return Verdict(
        "admitted",
        200,
        f"admitted: {fits} like it run at once; the next {queue if queue is not None else 100} wait in the router's "
        f"queue (up to queue_timeout_secs={router.get('queue_timeout_secs', 60)}, then 'timed out waiting for an "
        "admission slot'); beyond that smg answers 429 'admission queue is at capacity'",
        fits,
    )
