"""Would a request of this shape be served? The limits SGLang 0.5.23 and smg 1.13.0 apply to one request, in
the order they apply them, each with the exact text the server answers; the simulator applies the same checks.

Order: per-call context (TokenizerManager._validate_one_request), max_req_input_len (the scheduler's
validate_input_length), the KV pool (the scheduler caps max_new_tokens at max_req_len - input - 1), the router's
max_payload_size, then admission (how many such requests run at once, how many wait in smg's queue).

The front (HAProxy) sends a call to any router of the fleet, so a call is judged by each of them: one that any router
refuses is refused, and the router that refuses it is named.
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
    router: str | None = None  # the router whose limit refuses it, where the front has several


# A router as check_request takes it: its envelope alone (one router), or its host and envelope for each router the
# front sends calls to.
Routers = Mapping[str, Any] | Sequence[tuple[str, Mapping[str, Any]]]


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
    router: Routers,
    input_tokens: int,
    max_new_tokens: int,
    chat: bool = False,
    decode_engines: int = 1,
    engines: Sequence[Engine] | None = None,
    generating: Any = None,
) -> Verdict:
    """The verdict for one request shape against the engines' limits (capacity model EngineLimits: one engine's, or a
    sequence of every engine's, prefill and decode) and the router envelope. smg may send the call to any prefill and
    any decode engine, so the length checks are the tightest engine's: the first check any engine refuses it by,
    with the text of the engine that refuses it by the smallest limit (the first given among equals). The front may
    send it to any router: the payload check is the smallest max_payload_size's, that router named where there are
    several. The answer's length is capped by the engines that generate it (`generating`: the decode engines'
    limits; default: every engine given): each engine's scheduler caps max_new_tokens by its own max_req_len, and a
    prefill engine generates one token. Admission is the fleet answer over `engines` (sglang_fleet) and every
    router, else over `decode_engines` engines like the generating one with the smallest max_req_len."""
    every = _each(limits)
    prompt = input_tokens + (CHAT_TEMPLATE_TOKENS if chat else 0)
    refusals = []
    for one in every:
        error = length_error(one.context_len, one.max_req_input_len, prompt, max_new_tokens)
        if error:
            bound = one.context_len if error.limit == "context_length" else one.max_req_input_len
            refusals.append((LENGTH_LIMITS.index(error.limit), bound, error))
    if refusals:
        return min(refusals, key=lambda r: r[:2])[2]
    generators = every if generating is None else _each(generating)
    tightest = min(generators, key=lambda one: int(one.max_req_len))
    cap = max(0, tightest.max_req_len - prompt - 1)
    if max_new_tokens > cap:
        return Verdict(
            "kv_pool",
            200,
            f"no error: the scheduler caps max_new_tokens at {cap} (max_req_len {tightest.max_req_len} = "
            f"min(context_len - 1, KV pool {tightest.max_total_num_tokens} - 1)), so the answer stops early",
        )
    routers = [("", router)] if isinstance(router, Mapping) else list(router)
    several = len(routers) > 1
    body = payload_bytes(prompt)
    over = [(int(env["max_payload_size"]), host) for host, env in routers
            if env.get("max_payload_size") is not None and body > int(env["max_payload_size"])]  # fmt: skip
    if over:
        size, host = min(over)
        whose = f"router {host}'s " if several else ""
        return Verdict(
            "max_payload_size",
            413,
            f"Request body exceeded the payload limit (max_payload_size) (a body of up to {body} bytes "
            f"against {whose}max_payload_size={size})",
            router=host if several else None,
        )
    fleet = list(engines or [Engine.from_limits("decode", "decode", tightest)] * max(1, decode_engines))
    fits = answer(fleet, [env for _host, env in routers], prompt + max_new_tokens).memory.parallel
    if fits < 1:
        return Verdict(
            "admission",
            429,
            "admission queue is at capacity (smg admission_queue_full): no such request fits the KV pool",
        )
    return Verdict(
        "admitted",
        200,
        f"admitted: {fits} like it run at once{_queues(routers)}, then 'timed out waiting for an admission slot'); "
        "beyond that smg answers 429 'admission queue is at capacity'",
        fits,
    )


def _each(limits: Any) -> list[Any]:
    """One engine's limits, or a sequence of them, as a list."""
    return list(limits) if isinstance(limits, Sequence) else [limits]


def _queues(routers: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """What each router admits and queues (smg's defaults: a queue of 100 for up to 60 s), up to the last bracket."""
    queues = [(host, env.get("queue_size"), env.get("queue_timeout_secs", 60)) for host, env in routers]
    queued = [100 if size is None else int(size) for _host, size, _secs in queues]
    if len(routers) == 1:
        return f"; the next {queued[0]} wait in the router's queue (up to queue_timeout_secs={queues[0][2]}"
    admits = ", ".join(f"{host} {env.get('max_concurrent_requests') or 'unbounded'}" for host, env in routers)
    each = ", ".join(
        f"{host} {n} for up to queue_timeout_secs={secs}" for (host, _s, secs), n in zip(queues, queued, strict=True)
    )
    return f" (the routers admit {admits}); the next {sum(queued)} wait in the routers' queues ({each}"
