"""Process lifecycle and engine-level admission: startup delay, SIGTERM drain, queue cap by mode."""

from __future__ import annotations

import concurrent.futures
import json
import signal
import time
from collections.abc import Mapping

import httpx
from simtools import Launcher, Sim, wait_http_ok

SLOW = {"SGLANG_SIM_TTFT_MS": "10", "SGLANG_SIM_TOKENS_PER_SEC": "20", "SGLANG_SIM_STEP_MS": "20"}
QUEUE_FULL_BODY = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "503",
    "param": None,
    "code": 503,
}


def sse(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


def post_many(url: str, n: int, payload: Mapping[str, object], path: str = "/generate") -> list[httpx.Response]:
    def one(i: int) -> httpx.Response:
        time.sleep(0.05 * i)  # arrive in order
        return httpx.post(url + path, json=payload, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(n) as pool:
        return list(pool.map(one, range(n)))


def load(sim: Sim) -> tuple[int, int]:
    """(running, waiting) requests of the engine, from its /v1/loads."""
    loads = httpx.get(sim.url + "/v1/loads", timeout=5).json()["loads"]
    return sum(x["num_running_reqs"] for x in loads), sum(x["num_waiting_reqs"] for x in loads)


def wait_load(sim: Sim, running: int, waiting: int, timeout: float = 20.0) -> None:
    """Wait (bounded) until the engine runs `running` requests and queues `waiting`."""
    deadline = time.monotonic() + timeout
    seen = load(sim)
    while seen != (running, waiting):
        assert time.monotonic() < deadline, f"(running, waiting) is {seen}, expected {(running, waiting)}"
        time.sleep(0.02)
        seen = load(sim)


def wait_health(sim: Sim, status: int, timeout: float = 20.0) -> None:
    """Wait (bounded) until the engine's /health answers `status`."""
    deadline = time.monotonic() + timeout
    while (code := httpx.get(sim.url + "/health", timeout=2).status_code) != status:
        assert time.monotonic() < deadline, f"/health answers {code}, expected {status}"
        time.sleep(0.02)


def over_the_cap(sim: Sim, payload: Mapping[str, object], path: str = "/generate") -> list[httpx.Response]:
    """Four requests against --max-running-requests 1 --max-queued-requests 1: the first runs, the second queues
    (each sent once the engine shows the one before running or queued: bounded waits, not a head start in time),
    then two more arrive while both are still there. Each admitted request generates for 6 s (120 tokens at 20
    tokens/s): the two bounded waits before the later requests took over 2 s once on a loaded 2-core machine."""

    def send() -> httpx.Response:
        return httpx.post(sim.url + path, json=payload, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        first = pool.submit(send)
        wait_load(sim, 1, 0)
        second = pool.submit(send)
        wait_load(sim, 1, 1)
        later = [pool.submit(send) for _ in range(2)]
        return [f.result(timeout=60) for f in (first, second, *later)]


def test_startup_delay_then_ready(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim(env={"SGLANG_SIM_STARTUP_DELAY_S": "1.5"}, wait=False)
    # A bound on the wait, not on the startup: a loaded machine may take seconds to start the interpreter. The
    # 1.5 s delay counts from the moment the server listens, so the 503s are seen whatever the startup took.
    deadline = time.monotonic() + 60
    seen: dict[str, set[int]] = {"/health": set(), "/ready": set(), "/health_generate": set()}
    while time.monotonic() < deadline and 200 not in seen["/health"]:
        for path, codes in seen.items():
            try:
                codes.add(httpx.get(sim.url + path, timeout=1).status_code)
            except httpx.HTTPError:
                pass
        time.sleep(0.05)
    assert 503 in seen["/health"] and 503 in seen["/ready"] and 503 in seen["/health_generate"], seen
    assert 200 in seen["/health"], seen
    assert httpx.get(sim.url + "/ready", timeout=1).status_code == 200
    log = sim.log()
    assert "max_total_num_tokens=" in log and "max_running_requests=256" in log and "context_len=1048576" in log
    assert "The server is fired up and ready to roll!" in log


def test_sigterm_drains_in_flight_requests(fresh_launcher: Launcher) -> None:
    """A request in flight when SIGTERM comes is finished; new ones are refused meanwhile. The request is running
    before the signal (a bounded wait on /v1/loads, not a head start in time) and generates for 4 s (80 tokens at
    20 tokens/s), far longer than the checks made while it runs take."""
    sim = fresh_launcher.sim(["--max-running-requests", "4"], env=SLOW)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            httpx.post,
            sim.url + "/generate",
            json={"text": "a", "sampling_params": {"max_new_tokens": 80}},
            timeout=30,
        )
        wait_load(sim, 1, 0)
        sim.popen.send_signal(signal.SIGTERM)
        wait_health(sim, 503)
        refused = httpx.post(sim.url + "/generate", json={"text": "b"}, timeout=5)
        assert refused.status_code == 503
        done = pending.result(timeout=30)
    assert done.status_code == 200 and done.json()["meta_info"]["completion_tokens"] == 80
    assert sim.popen.wait(10) == 0
    assert "Gracefully exiting... Remaining number of requests 1." in sim.log()


def test_queue_cap_in_null_mode(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim(["--max-running-requests", "1", "--max-queued-requests", "1"], env=SLOW)
    payload = {"text": "q", "sampling_params": {"max_new_tokens": 120}}
    responses = over_the_cap(sim, payload)
    codes = sorted(r.status_code for r in responses)
    assert codes == [200, 200, 503, 503], codes
    assert [r.json() for r in responses if r.status_code == 503] == [QUEUE_FULL_BODY] * 2
    chat = over_the_cap(
        sim, {"model": "x", "messages": [{"role": "user", "content": "q"}], "max_tokens": 120}, "/v1/chat/completions"
    )
    assert sorted(r.status_code for r in chat) == [200, 200, 503, 503]
    assert [r.json() for r in chat if r.status_code == 503] == [QUEUE_FULL_BODY] * 2


def test_queue_cap_inside_streams(fresh_launcher: Launcher) -> None:
    """Streaming requests get the abort inside a 200 event stream, as in SGLang."""
    sim = fresh_launcher.sim(["--max-running-requests", "1", "--max-queued-requests", "1"], env=SLOW)
    streams = over_the_cap(sim, {"text": "q", "sampling_params": {"max_new_tokens": 120}, "stream": True})
    assert [r.status_code for r in streams] == [200] * 4
    finals = [json.loads(sse(r.text)[-2])["meta_info"]["finish_reason"] for r in streams]
    aborts = [f for f in finals if f["type"] == "abort"]
    assert (
        aborts == [{"type": "abort", "message": "The request queue is full.", "status_code": 503, "err_type": None}] * 2
    )
    chat = {"model": "x", "messages": [{"role": "user", "content": "q"}], "max_tokens": 120, "stream": True}
    streams = over_the_cap(sim, chat, "/v1/chat/completions")
    assert [r.status_code for r in streams] == [200] * 4
    errors = [json.loads(sse(r.text)[0]) for r in streams if "error" in sse(r.text)[0]]
    assert (
        errors
        == [
            {
                "error": {
                    "object": "error",
                    "message": "The request queue is full.",
                    "type": "SERVICE_UNAVAILABLE",
                    "param": None,
                    "code": 503,
                }
            }
        ]
        * 2
    )
    assert all(sse(r.text)[-1] == "[DONE]" for r in streams)


def test_queue_cap_ignored_in_pd_mode_and_metrics_off(fresh_launcher: Launcher) -> None:
    flags = ["--max-running-requests", "1", "--max-queued-requests", "1", "--disaggregation-mode", "decode"]
    sim = fresh_launcher.sim(flags, env=SLOW)
    # No bootstrap fields: the decode runs the request without a prefill (as for SGLang's fake bootstrap host).
    responses = post_many(sim.url, 4, {"text": "q", "sampling_params": {"max_new_tokens": 4}})
    assert [r.status_code for r in responses] == [200, 200, 200, 200]
    assert httpx.get(sim.url + "/metrics", timeout=5).status_code == 404
    assert httpx.get(sim.url + "/server_info", timeout=5).json()["max_queued_requests"] == 1


def test_data_parallel_ranks(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim(["--dp-size", "2", "--max-running-requests", "64"])
    info = httpx.get(sim.url + "/server_info", timeout=5).json()
    assert info["dp_size"] == 2 and len(info["internal_states"]) == 2
    per_rank = info["internal_states"][0]["effective_max_running_requests_per_dp"]
    for _ in range(4):
        assert (
            httpx.post(
                sim.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}}, timeout=10
            ).status_code
            == 200
        )
    loads = httpx.get(sim.url + "/v1/loads", timeout=5).json()["loads"]
    assert [load["dp_rank"] for load in loads] == [0, 1]
    assert all(load["max_running_requests"] == per_rank for load in loads)
    only = httpx.get(sim.url + "/v1/loads", params={"dp_rank": 1}, timeout=5).json()["loads"]
    assert [load["dp_rank"] for load in only] == [1]


def test_never_ready_keeps_health_503_and_stops_cleanly(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim(env={"SGLANG_SIM_NEVER_READY": "1"}, wait=False)
    # First a bounded wait for the server to answer at all (a loaded machine may take seconds to start it), then
    # 3 s of answers, every one of which must be 503.
    codes: list[int] = []
    deadline = time.monotonic() + 60
    while not codes:
        assert time.monotonic() < deadline, f"the simulator never answered:\n{sim.log()}"
        try:
            codes.append(httpx.get(sim.url + "/health", timeout=1).status_code)
        except httpx.HTTPError:
            time.sleep(0.2)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            codes.append(httpx.get(sim.url + "/health", timeout=1).status_code)
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    assert codes and set(codes) == {503}, codes
    assert "SGLANG_SIM_NEVER_READY=1" in sim.log()
    assert sim.terminate() == 0


def test_crash_after_turning_ready(fresh_launcher: Launcher) -> None:
    """/health answers 200 (seen while polling: no second request that a crash could beat), then the process
    exits 1 by itself."""
    sim = fresh_launcher.sim(env={"SGLANG_SIM_CRASH_AFTER_S": "3"}, wait=False)
    wait_http_ok(sim.url + "/health", 60, sim)
    assert sim.popen.wait(30) == 1
    assert "simulated crash 3 s after turning ready" in sim.log()
    sim.kill()
