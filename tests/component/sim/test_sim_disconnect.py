"""A call abandoned while it waits for its first token is aborted, as SGLang 0.5.23 aborts it (its tokenizer manager
waits for the next output with a timeout and aborts the request once `request.is_disconnected()`): on the simulator
alone, streamed or not, and through the real smg 1.13.0 router in front of a simulated prefill/decode pair, where the
router must pass the client's disconnect on to both engines. Without that, an engine goes on running every call a
client gave up on (a benchmark's timed-out wave keeps a decode engine busy for minutes)."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from simtools import Launcher, Sim, free_port

# The first token comes 30 s after admission: a call abandoned after 1 s is still waiting for it.
ENV = {"SGLANG_SIM_TTFT_MS": "30000", "SGLANG_SIM_TOKENS_PER_SEC": "50", "SGLANG_SIM_STEP_MS": "20"}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192"]
ABORTED_WITHIN_S = 8.0  # the simulator checks every second; SGLang every 4 s


def running(sim: Sim) -> int:
    loads = httpx.get(sim.url + "/v1/loads", timeout=5).json()["loads"]
    return sum(x["num_running_reqs"] + x["num_waiting_reqs"] for x in loads)


def abandon(url: str, path: str, body: dict[str, object], after_s: float = 1.0) -> None:
    """Send the call on a raw connection, then close it after `after_s` without reading the answer."""
    parts = urlsplit(url)
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as conn:
        conn.sendall(head + payload)
        time.sleep(after_s)


def wait_idle(sims: list[Sim], within_s: float) -> float:
    """Seconds until every engine runs and queues nothing; fails after `within_s`."""
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        if all(running(s) == 0 for s in sims):
            return time.monotonic() - start
        time.sleep(0.2)
    raise AssertionError(f"still running after {within_s} s: {[running(s) for s in sims]}")


GENERATE = {"text": "a b c d", "sampling_params": {"max_new_tokens": 50}}
COMPLETION = {"model": "dsv4", "prompt": "a b c d", "max_tokens": 50}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/generate", {**GENERATE, "stream": True}),
        ("/generate", GENERATE),
        ("/v1/completions", {**COMPLETION, "stream": True}),
    ],
    ids=["generate-stream", "generate", "completions-stream"],
)
def test_the_simulator_aborts_a_call_whose_client_went_away(
    path: str, body: dict[str, object], fresh_launcher: Launcher
) -> None:
    sim = fresh_launcher.sim(COMMON, env=ENV)
    abandon(sim.url, path, body)
    wait_idle([sim], ABORTED_WITHIN_S)
    assert "Client disconnected: rid=" in sim.log()


def test_smg_passes_a_disconnect_on_only_at_the_first_token(fresh_launcher: Launcher) -> None:
    """smg 1.13.0 in PD mode keeps its connections to the engines open while the first token is pending, though its
    client left: the prefill engine runs the abandoned prefill to its end, and the decode engine learns of the
    disconnect when it writes the first token, then aborts the call. So an abandoned call holds the engines until
    its first token, never longer (the decode does not run its output tokens)."""
    ttft_s = 10.0
    env = {**ENV, "SGLANG_SIM_TTFT_MS": str(int(ttft_s * 1000))}
    bport = free_port()
    prefill = fresh_launcher.sim(
        [*COMMON, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)], env=env
    )
    decode = fresh_launcher.sim([*COMMON, "--disaggregation-mode", "decode"], env=env)
    _router, url = fresh_launcher.smg(
        ["--pd-disaggregation", "--prefill", prefill.url, str(bport), "--decode", decode.url,
         "--policy", "round_robin"]
    )  # fmt: skip
    left = time.monotonic()
    abandon(url, "/generate", {**GENERATE, "stream": True}, after_s=1.0)
    time.sleep(ABORTED_WITHIN_S - 1.0)
    assert running(prefill) == 1, "smg passed the disconnect on to the prefill engine before the first token"
    wait_idle([prefill, decode], ttft_s + ABORTED_WITHIN_S)
    ended = time.monotonic() - left
    print(f"both engines idle {ended:.1f} s after the call was sent (first token due at {ttft_s:g} s)")
    assert ended < ttft_s + ABORTED_WITHIN_S
    assert "Client disconnected: rid=" in decode.log()
