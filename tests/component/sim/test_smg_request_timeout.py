"""What smg 1.13.0's `--request-timeout-secs` (the router envelope's `request_timeout_secs`) covers in PD mode, measured
with the real router in front of a simulated pair on loopback.

The router runs with the flags the router role renders from the declared envelope (group_vars/all/envelope.yml), with
request_timeout_secs 3 and retry_max_retries 2 so that every case ends in seconds; the circuit breaker is off so that
the cases, sent together, do not open it for one another. The prefill takes 5 s over a 5,000-word prompt; the decode
makes 10 tokens a second, so 60 tokens last 6 s.

What the client sees:
- The timeout bounds each upstream attempt as a whole, from the send to the last byte: a stream whose tokens flow
  without a pause is cut 3 s after it started, however many chunks came before. It is not a first-byte and not an
  idle timeout.
- Once a 200 has gone out (a `/generate` stream, whose engine answers headers at once, or a chat stream whose first
  token came in time), the cut is an SSE error event, `stream_error` "... operation timed out", then `data: [DONE]`,
  in that 200 response; it is not retried.
- Before a response has started (an unstreamed call, or a chat stream whose first token is late: SGLang holds its
  headers until the first chunk), a timed-out attempt is a transport error that smg retries, each attempt with a fresh
  full timeout, so the client waits retry_max_retries x request_timeout_secs (plus backoff) and gets a 502
  "PD disaggregation request failed".
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import router_envelope
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import to_argv
from simtools import REPO, Launcher, Proc, free_port

TIMEOUT_S = 3
ATTEMPTS = 2  # retry_max_retries: smg's attempts in all, the first included
COMMON = [
    "--served-model-name",
    "dsv4",
    "--context-length",
    "16384",
    "--max-running-requests",
    "32",
    "--enable-metrics",
]
PREFILL_ENV = {"SGLANG_SIM_TTFT_MS": "20", "SGLANG_SIM_PREFILL_TOKENS_PER_SEC": "1000"}
DECODE_ENV = {"SGLANG_SIM_TTFT_MS": "20", "SGLANG_SIM_TOKENS_PER_SEC": "10", "SGLANG_SIM_STEP_MS": "20"}
SHORT = ("hi there", 60)  # first token at once, 6 s of output: case (a)
LONG = (" ".join(["w"] * 5000), 5)  # first token after the 5 s prefill: case (b)
CUT = "Stream error: error decoding response body: request or response body error: operation timed out"
TRANSPORT = re.compile(
    r"Transport error: error sending request for url \(http://127\.0\.0\.1:\d+/(generate|v1/chat/completions)\)"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Call:
    """What one client saw: status, when the headers and the last byte came, the SSE events with their times."""

    status: int
    headers_s: float
    end_s: float
    body: str
    request_id: str
    events: list[tuple[float, str]] = field(default_factory=list)

    def json_events(self) -> list[dict[str, Any]]:
        return [json.loads(data) for _t, data in self.events if data != "[DONE]"]


def body(path: str, prompt: tuple[str, int], stream: bool) -> dict[str, Any]:
    text, tokens = prompt
    if path == "/generate":
        return {"text": text, "sampling_params": {"max_new_tokens": tokens}, "stream": stream}
    return {"model": "dsv4", "messages": [{"role": "user", "content": text}], "max_tokens": tokens, "stream": stream}


def call(url: str, path: str, payload: dict[str, Any], start: threading.Barrier) -> Call:
    with httpx.Client(timeout=30) as client:
        client.get(url + "/health")  # the connection is open before the barrier
        start.wait(timeout=30)
        t0 = time.monotonic()
        with client.stream("POST", url + path, json=payload) as resp:
            headers_s = time.monotonic() - t0
            events: list[tuple[float, str]] = []
            raw = ""
            for line in resp.iter_lines():
                raw += line + "\n"
                if line.startswith("data: "):
                    events.append((time.monotonic() - t0, line[6:]))
            return Call(resp.status_code, headers_s, time.monotonic() - t0, raw, resp.headers["x-request-id"], events)


@pytest.fixture(scope="module")
def router(launcher: Launcher) -> tuple[Proc, str]:
    bport = free_port()
    prefill = launcher.sim(
        [*COMMON, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)], PREFILL_ENV
    )
    decode = launcher.sim([*COMMON, "--disaggregation-mode", "decode"], DECODE_ENV)
    declared = yaml.safe_load((REPO / "group_vars" / "all" / "envelope.yml").read_text())["sglang_router"]
    envelope = router_envelope(
        {"sglang_router": {**declared, "request_timeout_secs": TIMEOUT_S, "retry_max_retries": ATTEMPTS}}
    )
    for listener in ("host", "port", "prometheus_host", "prometheus_port"):  # the launcher picks free ones
        envelope.pop(listener)
    flags = to_argv("router", envelope)
    assert flags[flags.index("--request-timeout-secs") + 1] == str(TIMEOUT_S)
    proc, url = launcher.smg(
        [
            "--pd-disaggregation",
            "--prefill",
            prefill.url,
            str(bport),
            "--decode",
            decode.url,
            *flags,
            "--disable-circuit-breaker",
        ]
    )
    deadline = time.monotonic() + 15
    while httpx.get(url + "/readiness", timeout=2).json().get("healthy_workers") != 2:
        assert time.monotonic() < deadline, "router not ready"
        time.sleep(0.1)
    return proc, url


CASES = {
    (path, case, stream): body(path, prompt, stream)
    for path in ("/generate", "/v1/chat/completions")
    for case, prompt in (("a", SHORT), ("b", LONG))
    for stream in (True, False)
}


@pytest.fixture(scope="module")
def calls(router: tuple[Proc, str]) -> dict[tuple[str, str, bool], Call]:
    """Every case once, all sent together so that the module lasts as long as its longest case."""
    _proc, url = router
    start = threading.Barrier(len(CASES))
    with ThreadPoolExecutor(len(CASES)) as pool:
        futures = {key: pool.submit(call, url, key[0], payload, start) for key, payload in CASES.items()}
        return {key: f.result(timeout=60) for key, f in futures.items()}


def attempts_logged(proc: Proc, request_id: str) -> int:
    log = ANSI.sub("", proc.log())
    return sum(
        1
        for line in log.splitlines()
        if request_id in line and "PD request transport error, both sides aborted" in line
    )


@pytest.mark.parametrize("path", ["/generate", "/v1/chat/completions"])
def test_a_stream_that_started_in_time_is_cut_at_the_timeout_while_tokens_flow(
    calls: dict[tuple[str, str, bool], Call], router: tuple[Proc, str], path: str
) -> None:
    c = calls[(path, "a", True)]
    assert c.status == 200 and c.headers_s < 1.5, c
    *tokens, (cut_s, cut), (_done_s, done) = c.events
    # Tokens flowed every 0.1 s right up to the cut: no idle gap, yet the stream ends at the timeout.
    assert len(tokens) >= 15 and tokens[0][0] < 1.5 and tokens[-1][0] > TIMEOUT_S - 1.0, [t for t, _ in tokens]
    gaps = [b - a for (a, _), (b, _) in zip(tokens, [*tokens[1:], (cut_s, cut)], strict=True)]
    assert max(gaps) < 1.0, gaps
    assert json.loads(cut) == {"error": {"message": CUT, "type": "stream_error"}}
    assert done == "[DONE]"
    assert TIMEOUT_S - 0.1 < cut_s < TIMEOUT_S + 1.5 and c.end_s < TIMEOUT_S + 1.5, (cut_s, c.end_s)
    # smg logs the cut against the decode worker and does not retry it.
    log = ANSI.sub("", router[0].log())
    cut_lines = [line for line in log.splitlines() if c.request_id in line and "Stream ended by the worker" in line]
    assert len(cut_lines) == 1, cut_lines
    assert f"Stream ended by the worker before completion: {CUT[len('Stream error: ') :]}" in cut_lines[0]
    assert 'worker_type="decode"' in cut_lines[0] and 'http_status=504 error_type="timeout"' in cut_lines[0]
    assert attempts_logged(router[0], c.request_id) == 0


def test_a_generate_stream_whose_first_token_is_late_gets_200_then_the_cut(
    calls: dict[tuple[str, str, bool], Call],
) -> None:
    c = calls[("/generate", "b", True)]
    # SGLang's /generate answers a stream's headers at once, so the 200 is out before the timeout.
    assert c.status == 200 and c.headers_s < 1.5, c
    assert c.json_events() == [{"error": {"message": CUT, "type": "stream_error"}}], c.events
    assert c.events[-1][1] == "[DONE]"
    assert TIMEOUT_S - 0.1 < c.events[0][0] < TIMEOUT_S + 1.5, c.events


@pytest.mark.parametrize(
    "key",
    [
        ("/v1/chat/completions", "b", True),  # SGLang holds a chat stream's headers until its first chunk
        ("/generate", "a", False),
        ("/generate", "b", False),
        ("/v1/chat/completions", "a", False),
        ("/v1/chat/completions", "b", False),
    ],
    ids=lambda k: f"{k[0]}-{k[1]}-{'stream' if k[2] else 'plain'}",
)
def test_a_call_without_a_response_yet_is_retried_each_attempt_with_a_full_timeout_then_502(
    calls: dict[tuple[str, str, bool], Call], router: tuple[Proc, str], key: tuple[str, str, bool]
) -> None:
    c = calls[key]
    assert c.status == 502, c
    error = json.loads(c.body)["error"]
    assert (error["type"], error["code"]) == ("server_error", "PD disaggregation request failed"), error
    assert TRANSPORT.fullmatch(error["message"]), error
    assert c.events == []
    assert attempts_logged(router[0], c.request_id) == ATTEMPTS
    # Each attempt waited the whole timeout: the call lasts ATTEMPTS timeouts plus the backoff (100 ms here).
    assert ATTEMPTS * TIMEOUT_S - 0.1 < c.headers_s < ATTEMPTS * TIMEOUT_S + 2.0, c.headers_s
