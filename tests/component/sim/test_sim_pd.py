"""Prefill/decode disaggregation end to end: the real smg 1.13.0 router in front of a simulated pair."""

from __future__ import annotations

import concurrent.futures
import json
import re
import time
from dataclasses import dataclass

import httpx
import pytest
from simtools import Launcher, Proc, Sim, free_port

ADMISSION = 3  # --max-concurrent-requests
ENV = {
    "SGLANG_SIM_TTFT_MS": "20",
    "SGLANG_SIM_TOKENS_PER_SEC": "50",
    "SGLANG_SIM_STEP_MS": "20",
    "SGLANG_SIM_PD_TIMEOUT_S": "3",
}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192", "--max-running-requests", "16", "--enable-metrics"]
SMG_WARNINGS = ("PD admission is off for this decode worker", "Bootstrap port did not accept a connection")
TOO_LONG = "The input (9000 tokens) is longer than the model's context length (8192 tokens)."


@dataclass
class Stack:
    prefill: Sim
    decode: Sim
    bootstrap_port: int
    router: Proc
    url: str


@pytest.fixture(scope="module")
def stack(launcher: Launcher) -> Stack:
    bport = free_port()
    prefill = launcher.sim(
        [
            *COMMON,
            "--disaggregation-mode",
            "prefill",
            "--disaggregation-bootstrap-port",
            str(bport),
            "--max-queued-requests",
            "1",
        ],
        ENV,
    )
    decode = launcher.sim([*COMMON, "--disaggregation-mode", "decode", "--max-queued-requests", "1"], ENV)
    router, url = launcher.smg(
        [
            "--pd-disaggregation",
            "--prefill",
            prefill.url,
            str(bport),
            "--decode",
            decode.url,
            "--policy",
            "round_robin",
            "--max-concurrent-requests",
            str(ADMISSION),
            "--queue-size",
            "0",
        ]
    )
    wait_ready(url)
    return Stack(prefill, decode, bport, router, url)


def wait_ready(url: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = httpx.get(url + "/readiness", timeout=2)
        if r.status_code == 200 and r.json().get("healthy_workers") == 2:
            return
        time.sleep(0.1)
    raise AssertionError(f"router not ready: {r.status_code} {r.text}")


def metric(sim: Sim, name: str) -> float:
    text = httpx.get(sim.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def test_router_sees_two_healthy_workers_without_warnings(stack: Stack) -> None:
    r = httpx.get(stack.url + "/readiness", timeout=5)
    assert (r.status_code, r.json()) == (200, {"status": "ready", "healthy_workers": 2, "total_workers": 2})
    log = stack.router.log()
    for warning in SMG_WARNINGS:
        assert warning not in log, warning
    workers = {w["worker_type"]: w for w in httpx.get(stack.url + "/workers", timeout=5).json()["workers"]}
    assert workers["decode"]["labels"]["max_running_requests"] == "16"
    assert workers["prefill"]["bootstrap_port"] == stack.bootstrap_port
    assert httpx.get(f"http://127.0.0.1:{stack.bootstrap_port}/health", timeout=5).text == "OK"


def test_generate_and_chat_through_the_router(stack: Stack) -> None:
    before = metric(stack.prefill, "sglang:num_requests_total"), metric(stack.decode, "sglang:num_requests_total")
    r = httpx.post(
        stack.url + "/generate", json={"text": "hello there", "sampling_params": {"max_new_tokens": 5}}, timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.json()["meta_info"]["completion_tokens"] == 5 and r.json()["meta_info"]["prompt_tokens"] == 2
    chat = {"model": "dsv4", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    r = httpx.post(stack.url + "/v1/chat/completions", json=chat, timeout=30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] == 4
    r = httpx.post(stack.url + "/v1/chat/completions", json={**chat, "stream": True}, timeout=30)
    assert r.status_code == 200
    events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content") or "" for e in events[:-1])
    assert len(text.split()) == 4
    # Both engines served all three requests; the prefill produced one token each.
    after = metric(stack.prefill, "sglang:num_requests_total"), metric(stack.decode, "sglang:num_requests_total")
    assert (after[0] - before[0], after[1] - before[1]) == (3, 3)


def test_over_context_comes_back_400_with_sglang_text(stack: Stack) -> None:
    words = " ".join(["w"] * 9000)
    r = httpx.post(stack.url + "/generate", json={"text": words, "sampling_params": {"max_new_tokens": 1}}, timeout=30)
    assert r.status_code == 400 and TOO_LONG in r.json()["error"]["message"]
    chat = {"model": "dsv4", "messages": [{"role": "user", "content": words}], "max_tokens": 1}
    r = httpx.post(stack.url + "/v1/chat/completions", json=chat, timeout=30)
    assert r.status_code == 400
    assert "The input (9003 tokens) is longer than the model's context length (8192 tokens)." in r.text


def test_router_admission_gives_429_beyond_its_limit(stack: Stack) -> None:
    extra = 4
    payload = {"text": "busy", "sampling_params": {"max_new_tokens": 75}}  # about 1.5 s each

    def one(_: int) -> int:
        return httpx.post(stack.url + "/generate", json=payload, timeout=30).status_code

    with concurrent.futures.ThreadPoolExecutor(ADMISSION + extra) as pool:
        codes = list(pool.map(one, range(ADMISSION + extra), timeout=60))
    assert len(codes) == ADMISSION + extra
    assert sorted(codes) == [200] * ADMISSION + [429] * extra, codes


def test_decode_completes_only_after_its_prefill(stack: Stack) -> None:
    room = 424242
    boot = {"bootstrap_host": "127.0.0.1", "bootstrap_port": stack.bootstrap_port, "bootstrap_room": room}
    body = {"text": "pd pair", "sampling_params": {"max_new_tokens": 3}, **boot}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        started = time.monotonic()
        decode = pool.submit(httpx.post, stack.decode.url + "/generate", json=body, timeout=30)
        time.sleep(0.6)
        assert not decode.done(), "the decode answered before its prefill ran"
        prefill = httpx.post(stack.prefill.url + "/generate", json=body, timeout=30)
        prefill_done = time.monotonic()
        result = decode.result(timeout=20)
    assert prefill.status_code == 200 and prefill.json()["meta_info"]["completion_tokens"] == 1
    assert result.status_code == 200 and result.json()["meta_info"]["completion_tokens"] == 3
    assert prefill_done - started >= 0.6


def test_decode_fails_in_bounded_time_when_its_prefill_is_gone(stack: Stack) -> None:
    dead = free_port()
    body = {
        "text": "orphan",
        "sampling_params": {"max_new_tokens": 3},
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": dead,
        "bootstrap_room": 77,
    }
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        plain = pool.submit(httpx.post, stack.decode.url + "/generate", json=body, timeout=30)
        streamed = pool.submit(httpx.post, stack.decode.url + "/generate", json={**body, "stream": True}, timeout=30)
        r, s = plain.result(timeout=30), streamed.result(timeout=30)
    elapsed = time.monotonic() - started
    assert r.status_code == 500
    assert re.fullmatch(
        r"Decode handshake failed for request rank=0 decode_req\.req\.rid='[0-9a-f]+' "
        r"decode_req\.req\.bootstrap_room=77 with exception KVTransferError\(bootstrap_room=77\): "
        r"Failed to get kvcache from prefill instance, it might be dead",
        r.json()["message"],
    ), r.json()
    assert r.json()["code"] == 500 and r.json()["type"] == "500"
    # A stream gets the abort as its last event, in a 200 response.
    assert s.status_code == 200
    events = [line[6:] for line in s.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    reason = json.loads(events[-2])["meta_info"]["finish_reason"]
    assert reason["type"] == "abort" and reason["status_code"] == 500
    assert reason["message"].endswith("Failed to get kvcache from prefill instance, it might be dead")
    assert 2.5 < elapsed < 15  # SGLANG_SIM_PD_TIMEOUT_S=3
    assert metric(stack.decode, "sglang:num_bootstrap_failed_reqs_total") >= 2


def test_prefill_rejection_reaches_the_waiting_decode(stack: Stack) -> None:
    room = 31337
    boot = {"bootstrap_host": "127.0.0.1", "bootstrap_port": stack.bootstrap_port, "bootstrap_room": room}
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        short = {"text": "short", "sampling_params": {"max_new_tokens": 2}, **boot}
        decode = pool.submit(httpx.post, stack.decode.url + "/generate", json=short, timeout=30)
        time.sleep(0.2)
        bad = httpx.post(
            stack.prefill.url + "/generate",
            json={"text": " ".join(["w"] * 9000), "sampling_params": {"max_new_tokens": 2}, **boot},
            timeout=30,
        )
        result = decode.result(timeout=20)
    assert bad.status_code == 400
    assert result.status_code == 500 and TOO_LONG in result.json()["message"]
