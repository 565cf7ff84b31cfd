"""The simulator keeps the time model's time: engines with their step times from the packaged step table
(SGLANG_SIM_STEP_TABLE=builtin), against sglang_perf.predict over the same table and the same FleetShape. The model
composes TTFT and ITL from step times in closed form (FIFO order statistics, a decode batch); the simulator runs
passes and steps as events: the two are independent, and agree within TOLERANCE.

Two topologies: a prefill/decode pair behind the real smg router, and one engine in mode null (no transfer). The calls
arrive together, as the model's burst does: the engine that prefills is paused (the decode_stall profile) while they
are sent and admitted, then resumed; TTFT is measured by the client from the resume to the first streamed token, ITL
per call as the time from its first to its last token over the tokens between, p50 over the calls."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import json
import time
from dataclasses import dataclass

import httpx
import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_terms as terms
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_table import TableSteps
from sglang_sim.timing import BUILTIN, TABLES, table_path
from simtools import MODEL_CONFIG, Launcher, Sim, free_port

SPEED = 0.25  # every step 4 times the model's: runs of seconds, far above the event loops' and HTTP hops' delays
TOLERANCE = 0.15
ATTEMPTS = 3  # bursts at most, until one agrees (see test_ttft_and_itl_are_the_models)
ISL, OSL = 1000, 32
ENV = {
    "SGLANG_SIM_STEP_TABLE": BUILTIN,
    "SGLANG_SIM_SPEED_FACTOR": str(SPEED),
    "SGLANG_DSV4_BF16_INDEX_K": "1",
    "SGLANG_SIM_STEP_MS": "5",
}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192", "--chunked-prefill-size", "8192"]
RUNNING = 64
CALLS = itertools.count()


@dataclass
class Stack:
    prefills: Sim  # the engine that prefills (paused while a burst arrives)
    decodes: Sim  # the engine that decodes (observes the inter-token latency)
    url: str  # where the calls go
    fleet: perf.FleetShape


def shape(backend: str) -> perf.FleetShape:
    """The FleetShape each engine builds for itself from its arguments (sglang_sim.timing.step_clock)."""
    return perf.fleet_shape(
        json.loads(MODEL_CONFIG.read_text()),
        TableSteps.load(table_path(BUILTIN, 4)).table.grid.model,
        tp=4,
        chunked_prefill_size=8192,
        decode_max_running=RUNNING,
        bf16_index_k=True,
        kv_cache_dtype="fp8_e4m3",
        transfer_backend=backend,
    )


@pytest.fixture(scope="module")
def stacks(launcher: Launcher) -> dict[str, Stack]:
    bport = free_port()
    metrics = ["--enable-metrics", "--max-running-requests", str(RUNNING)]
    prefill = launcher.sim(
        [*COMMON, *metrics, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)], ENV
    )
    decode = launcher.sim([*COMMON, *metrics, "--disaggregation-mode", "decode"], ENV)
    _router, url = launcher.smg(
        ["--pd-disaggregation", "--prefill", prefill.url, str(bport), "--decode", decode.url, "--policy", "round_robin"]
    )
    deadline = time.monotonic() + 15
    while httpx.get(url + "/readiness", timeout=2).json().get("healthy_workers") != 2:
        assert time.monotonic() < deadline, "router not ready"
        time.sleep(0.1)
    null = launcher.sim([*COMMON, *metrics], ENV)
    return {
        "pd": Stack(prefill, decode, url, shape("mooncake")),
        "null": Stack(null, null, null.url, dataclasses.replace(shape("mooncake"), transfer_bytes_per_s=float("inf"))),
    }


def call(url: str) -> tuple[float, list[tuple[float, int]]]:
    """One streamed /generate of ISL words and OSL tokens: (when sent, [(when, tokens so far)] of each chunk)."""
    text = " ".join([f"call{next(CALLS)}"] + ["w"] * (ISL - 1))  # a prompt of its own: no prefix cache hit
    body = {"text": text, "sampling_params": {"max_new_tokens": OSL}, "stream": True}
    sent = time.monotonic()
    seen: list[tuple[float, int]] = []
    with httpx.stream("POST", url + "/generate", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                assert "error" not in chunk, chunk
                tokens = int(chunk["meta_info"]["completion_tokens"])
                if tokens:
                    seen.append((time.monotonic(), tokens))
    assert seen and seen[-1][1] == OSL, seen[-3:]
    return sent, seen


def metric(sim: Sim, name: str) -> float:
    text = httpx.get(sim.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))


def burst(stack: Stack, n: int) -> list[tuple[float, list[tuple[float, int]]]]:
    """n calls queued on the paused prefilling engine, then resumed: (the resume, the chunks) of each call."""
    profile = stack.prefills.url + "/sim/profile"
    with httpx.Client(timeout=5) as client, concurrent.futures.ThreadPoolExecutor(n) as pool:
        assert client.post(profile, json={"profile": "decode_stall", "load": 0}).status_code == 200
        calls = [pool.submit(call, stack.url) for _ in range(n)]
        deadline = time.monotonic() + 20
        while metric(stack.prefills, "sglang:num_running_reqs") < n:
            assert time.monotonic() < deadline, "the calls did not reach the prefilling engine"
            time.sleep(0.02)
        resumed = time.monotonic()  # a client already connected: the switch follows within a millisecond or two
        assert client.post(profile, json={"profile": "normal"}).status_code == 200
        return [(resumed, done.result(timeout=120)[1]) for done in calls]


def itl(seen: list[tuple[float, int]]) -> float:
    (t0, k0), (t1, k1) = seen[0], seen[-1]
    return (t1 - t0) / (k1 - k0)


@pytest.mark.parametrize(("topology", "calls"), [("pd", 1), ("pd", 16), ("null", 16)])
def test_ttft_and_itl_are_the_models(stacks: dict[str, Stack], topology: str, calls: int) -> None:
    stack = stacks[topology]
    predicted = perf.predict(
        stack.fleet, perf.Workload(ISL, OSL, concurrency=calls), TableSteps.load(table_path(BUILTIN, 4))
    )
    model = {
        "TTFT p50": predicted.ttft_p50.ms / 1000 / SPEED,
        "TTFT p90": predicted.ttft_p90.ms / 1000 / SPEED,
        "ITL p50": predicted.itl_p50.ms / 1000 / SPEED,
    }
    gaps_before = metric(stack.decodes, "sglang:inter_token_latency_seconds_count")
    # A loaded machine only adds time (a late thread, a slow hop): a burst that misses is sent again, at most
    # ATTEMPTS times in all, and one must agree on every figure. A model that is wrong misses every one.
    reports = []
    for _attempt in range(ATTEMPTS):
        results = burst(stack, calls)
        ttfts = [seen[0][0] - resumed for resumed, seen in results]
        itls = [itl(seen) for _resumed, seen in results]
        measured = {
            "TTFT p50": terms.quantile(ttfts, 0.5),
            "TTFT p90": terms.quantile(ttfts, 0.9),
            "ITL p50": terms.quantile(itls, 0.5),
        }
        reports.append(", ".join(f"{k} {measured[k] * 1000:,.1f} ms (model {model[k] * 1000:,.1f})" for k in measured))
        print(f"{topology}, {calls} x {ISL} in, {OSL} out, speed factor {SPEED}: {reports[-1]}")
        if all(value == pytest.approx(model[key], rel=TOLERANCE) for key, value in measured.items()):
            break
    else:
        pytest.fail(f"no burst of {ATTEMPTS} agrees within {TOLERANCE:.0%}: " + "; ".join(reports))
    # the decoding engine observed every gap after a call's first token
    gaps = metric(stack.decodes, "sglang:inter_token_latency_seconds_count") - gaps_before
    assert gaps == len(reports) * calls * (OSL - 1)


def test_the_builtin_table_is_the_packaged_one_for_the_tp() -> None:
    assert table_path(BUILTIN, 4) == TABLES / "deepseek-ai--deepseek-v4-flash-tp4.json"
    with pytest.raises(ValueError, match="no single packaged step table for tp 8"):
        table_path(BUILTIN, 8)


def test_a_table_for_another_tp_stops_startup(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim(["--tp-size", "8"], {"SGLANG_SIM_STEP_TABLE": str(table_path(BUILTIN, 4))}, wait=False)
    assert sim.popen.wait(30) == 1
    assert "deepseek-ai--deepseek-v4-flash-tp4.json holds tp 4; this engine runs tp 8" in sim.log()
