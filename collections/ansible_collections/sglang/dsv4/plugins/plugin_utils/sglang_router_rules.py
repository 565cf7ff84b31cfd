"""The rules of one router envelope (scope `router`): smg 1.13.0's own rules and the bounds the decode fleet sets."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .sglang_rules import Finding, Rule, choice_findings, in_range, overridden_findings, port_findings

# Request body bytes per token, estimated high so one full-context request always fits the router's
# max_payload_size: token ids as JSON ints take at most 8 bytes (6 digits for a 129,280-entry vocabulary, a
# comma and a space); text JSON-escaped as \uXXXX takes 6 bytes a code point and a token rarely spans more
# than 2 non-ASCII code points (12 bytes). 16 bytes covers both, plus a fixed 64 KiB for the rest of the body
# (sampling parameters, chat roles and template fields).
PAYLOAD_BYTES_PER_TOKEN = 16
PAYLOAD_OVERHEAD_BYTES = 64 * 1024
SMG_DEFAULT_QUEUE_SIZE = 100  # smg 1.13.0 --queue-size
TIMEOUTS = (
    ("request_timeout_secs", "e.g. 1800"),
    ("health_check_interval_secs", "e.g. 60"),
    ("worker_startup_timeout_secs", "e.g. 1800"),
    ("shutdown_grace_period_secs", "e.g. 60"),
)
RETRIES = (
    ("retry_max_retries", 1, "e.g. 5 (1: no retry)"),
    ("retry_initial_backoff_ms", 0, "e.g. 100"),
    ("retry_max_backoff_ms", 0, "e.g. 2000"),
)
DECLARED, CHECKED = 1, 2  # the stages


def payload_bytes(tokens: int) -> int:
    """A conservative size of the request body that carries `tokens` tokens (see PAYLOAD_BYTES_PER_TOKEN)."""
    return int(tokens) * PAYLOAD_BYTES_PER_TOKEN + PAYLOAD_OVERHEAD_BYTES


@dataclass(frozen=True)
class RouterContext:
    """One router envelope, with what the decode fleet runs at once (0: unknown), the longest context (None:
    unknown), and what the fleet's other routers admit: the sum of their positive max_concurrent_requests, and how
    many they are. Each smg router admits its own max_concurrent_requests; their HA mesh shares no admission count
    (tests/component/sim/test_smg_mesh.py, two real routers), so the fleet admits the sum."""

    host: str
    env: Mapping[str, Any]
    decode_running: int
    context_len: int | None
    others_admit: int = 0
    other_routers: int = 0

    def var(self, key: str) -> str:
        return f"{self.host}: sglang_router.{key}"

    def get(self, key: str) -> Any:
        return self.env.get(key)


def _not_overridden(c: RouterContext) -> Iterator[Finding]:
    yield from overridden_findings(c.host, "router", {"sglang_router": c.env})


def _declared(c: RouterContext) -> Iterator[Finding]:
    if not c.env:
        yield Finding(
            f"{c.host}: sglang_router",
            c.env,
            "the router host declares no router envelope (port, policy, admission limits)",
            "declare sglang_router as in group_vars/all/envelope.yml",
        )


def _choice(c: RouterContext) -> Iterator[Finding]:
    yield from choice_findings("router", c.env, c.var)


def _port(c: RouterContext) -> Iterator[Finding]:
    yield from port_findings(c.var("port"), c.get("port"), True, "the router")
    yield from port_findings(c.var("prometheus_port"), c.get("prometheus_port"), False, "")


def _bounded(c: RouterContext) -> Iterator[Finding]:
    mcr = c.get("max_concurrent_requests")
    if mcr is None or int(mcr) < 1:
        meaning = {None: "unset means -1, which means", -1: "-1 means", 0: "0 means no limit:"}.get(
            mcr, "a negative value means"
        )
        yield Finding(
            c.var("max_concurrent_requests"),
            mcr,
            f"smg 1.13.0 reads it as no admission bound ({meaning} "
            "'derive 1024 per core' or 'off'), so the router admits more than the decode fleet runs",
            f"declare a positive bound <= {c.decode_running or 'the decode engines max_running_requests'}",
        )


def _within_decode(c: RouterContext) -> Iterator[Finding]:
    mcr = c.get("max_concurrent_requests")
    if mcr is None or int(mcr) < 1 or not c.decode_running or int(mcr) + c.others_admit <= c.decode_running:
        return
    if not c.other_routers:
        yield Finding(
            c.var("max_concurrent_requests"),
            mcr,
            f"above what the decode fleet runs at once ({c.decode_running})",
            f"lower it to <= {c.decode_running}; extra requests belong in queue_size",
        )
        return
    routers, left = c.other_routers + 1, c.decode_running - c.others_admit
    yield Finding(
        c.var("max_concurrent_requests"),
        mcr,
        f"with the other {c.other_routers} router(s)' {c.others_admit}, the {routers} routers admit "
        f"{int(mcr) + c.others_admit}, above what the decode fleet runs at once ({c.decode_running}): each smg "
        "router admits its own max_concurrent_requests, the mesh shares no count",
        (f"lower it to <= {left}, or " if left >= 1 else "")
        + f"give each of the {routers} routers {c.decode_running // routers}; extra requests belong in queue_size",
    )


def _queue_size(c: RouterContext) -> Iterator[Finding]:
    yield from in_range(
        c.var("queue_size"), c.get("queue_size"), 0, None, "must be >= 0 (0: refuse with 429 when full)", "e.g. 256"
    )


def _queue_timeout(c: RouterContext) -> Iterator[Finding]:
    # smg: "Must be > 0 when queue_size > 0" (queue_size defaults to 100); without a queue the timeout is unused.
    queued = c.env.get("queue_size", SMG_DEFAULT_QUEUE_SIZE)
    queued = SMG_DEFAULT_QUEUE_SIZE if queued is None else int(queued)
    yield from in_range(
        c.var("queue_timeout_secs"),
        c.get("queue_timeout_secs"),
        1 if queued > 0 else 0,
        None,
        f"queue_timeout_secs must be > 0 when queue_size > 0 (smg; queue_size={queued})"
        if queued > 0
        else "must be >= 0 seconds",
        "declare e.g. 60",
    )


def _timeouts(c: RouterContext) -> Iterator[Finding]:
    for name, fix in TIMEOUTS:
        yield from in_range(c.var(name), c.get(name), 1, None, f"{name} must be > 0 seconds (smg)", f"declare {fix}")


def _retries(c: RouterContext) -> Iterator[Finding]:
    for name, least, fix in RETRIES:
        yield from in_range(c.var(name), c.get(name), least, None, f"{name} must be >= {least} (smg)", f"declare {fix}")


def _admission_wait(c: RouterContext) -> Iterator[Finding]:
    yield from in_range(
        c.var("pd_admission_wait_secs"), c.get("pd_admission_wait_secs"), 0, None, "must be >= 0 seconds", "e.g. 30"
    )


def _payload(c: RouterContext) -> Iterator[Finding]:
    size = c.get("max_payload_size")
    if size is not None and c.context_len:
        need = payload_bytes(c.context_len)
        if int(size) < need:
            yield Finding(
                c.var("max_payload_size"),
                size,
                f"smaller than one full-context request ({c.context_len} tokens need up to {need} bytes at "
                f"{PAYLOAD_BYTES_PER_TOKEN} bytes a token + {PAYLOAD_OVERHEAD_BYTES} bytes), so smg answers "
                "413 'Request body exceeded the payload limit (max_payload_size)'",
                f"raise it to >= {need} (the shared envelope uses 536870912)",
            )


ROUTER_RULES: tuple[Rule, ...] = (
    Rule(
        "router.declared",
        DECLARED,
        ("sglang_router",),
        "a router host declares a router envelope (port, policy, admission limits)",
        "declare sglang_router as in group_vars/all/envelope.yml",
        _declared,
    ),
    Rule(
        "router.not_overridden",
        CHECKED,
        ("api_key",),
        "a declared key the deployment replaces never runs: an api_key renders as ${SGLANG_API_KEY}, which the role "
        "fills from sglang_api_key",
        "remove it and declare the API key as sglang_api_key",
        _not_overridden,
    ),
    Rule(
        "router.choice",
        CHECKED,
        ("any key whose flag has choices",),
        "a value must be one of smg 1.13.0's choices for its flag",
        "use one of the parser's choices",
        _choice,
    ),
    Rule(
        "router.port",
        CHECKED,
        ("port", "prometheus_port"),
        "a port must be from 1 to 65535, and the router must declare one (else it takes 30000)",
        "declare a free port from 1 to 65535",
        _port,
    ),
    Rule(
        "router.max_concurrent_requests_bounded",
        CHECKED,
        ("max_concurrent_requests",),
        "smg 1.13.0 reads an unset, zero or negative value as no admission bound",
        "declare a positive bound <= what the decode engines run at once",
        _bounded,
    ),
    Rule(
        "router.max_concurrent_requests_within_decode",
        CHECKED,
        (
            "max_concurrent_requests",
            "the other routers' max_concurrent_requests",
            "the decode engines' max_running_requests",
        ),
        "the routers together admit no more than the decode fleet runs at once (each router admits its own)",
        "lower it, or split the decode fleet's sum over the routers; extra requests belong in queue_size",
        _within_decode,
    ),
    Rule(
        "router.queue_size_non_negative",
        CHECKED,
        ("queue_size",),
        "must be >= 0 (0: refuse with 429 when full)",
        "e.g. 256",
        _queue_size,
    ),
    Rule(
        "router.queue_timeout_positive",
        CHECKED,
        ("queue_timeout_secs", "queue_size"),
        "queue_timeout_secs must be > 0 when queue_size > 0 (smg; queue_size defaults to 100), else >= 0",
        "declare e.g. 60",
        _queue_timeout,
    ),
    Rule(
        "router.timeouts_positive",
        CHECKED,
        tuple(name for name, _fix in TIMEOUTS),
        "must be > 0 seconds (smg)",
        "declare a positive number of seconds",
        _timeouts,
    ),
    Rule(
        "router.retries_at_least",
        CHECKED,
        tuple(name for name, _least, _fix in RETRIES),
        "retry_max_retries must be >= 1 and the backoffs >= 0 (smg)",
        "declare e.g. 5 retries, 100 ms and 2000 ms",
        _retries,
    ),
    Rule(
        "router.pd_admission_wait_non_negative",
        CHECKED,
        ("pd_admission_wait_secs",),
        "must be >= 0 seconds",
        "e.g. 30",
        _admission_wait,
    ),
    Rule(
        "router.max_payload_size_fits_context",
        CHECKED,
        ("max_payload_size", "the engines' context length"),
        f"one full-context request ({PAYLOAD_BYTES_PER_TOKEN} bytes a token + {PAYLOAD_OVERHEAD_BYTES} bytes) must "
        "fit, else smg answers 413",
        "raise it (the shared envelope uses 536870912)",
        _payload,
    ),
)
