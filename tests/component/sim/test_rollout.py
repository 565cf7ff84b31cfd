"""The rollout under load, on loopback: the real smg 1.13.0 router in front of simulated engines, closed-loop
clients from the load harness (bench/rollout_load.py) and the rollout steps of plugins/module_utils/sglang_rollout.py
(take the worker out of the router, wait on /v1/loads, restart, a real generation, put it back)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_rollout as rollout
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import router_worker_specs
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import probe
from simtools import REPO, Launcher, Proc, Sim, free_port

sys.path.insert(0, str(REPO / "tests" / "unit" / "audit"))
from audit_helpers import load_library, run_module

sys.path.insert(0, str(REPO / "bench"))
import rollout_load

ENV = {"SGLANG_SIM_TTFT_MS": "20", "SGLANG_SIM_TOKENS_PER_SEC": "50", "SGLANG_SIM_STEP_MS": "20"}
COMMON = ["--served-model-name", "dsv4", "--context-length", "8192", "--enable-metrics"]
# Each request runs about half a second on its decode engine, so a restart meets requests in flight.
MAX_TOKENS = 24


@dataclass
class Stack:
    launcher: Launcher
    prefill: Sim
    decodes: list[Sim]
    router: Proc
    url: str

    def restart_decode(self, index: int, max_running: int) -> Sim:
        """SIGTERM the decode engine (it finishes what it runs) and start it again on its port."""
        old = self.decodes[index]
        assert old.terminate(15) == 0, old.log()
        argv = self.launcher.sim_argv(old.port, decode_args(max_running))
        new = Sim(old.port, argv, self.launcher.logs / f"sim-{old.port}-restarted.log", ENV)
        self.launcher.procs.append(new)
        new.wait_healthy(15)
        self.decodes[index] = new
        return new


def decode_args(max_running: int) -> list[str]:
    return [*COMMON, "--disaggregation-mode", "decode", "--max-running-requests", str(max_running)]


def start_stack(launcher: Launcher, decodes: int) -> Stack:
    bport = free_port()
    prefill = launcher.sim(
        [*COMMON, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", str(bport)], ENV
    )
    engines = [launcher.sim(decode_args(64), ENV) for _ in range(decodes)]
    args = ["--pd-disaggregation", "--prefill", prefill.url, str(bport)]
    for d in engines:
        args += ["--decode", d.url]
    router, url = launcher.smg([*args, "--policy", "round_robin", "--max-concurrent-requests", "64"])
    deadline = time.monotonic() + 20
    while httpx.get(url + "/readiness", timeout=2).json().get("healthy_workers") != 1 + decodes:
        assert time.monotonic() < deadline, httpx.get(url + "/readiness").text
        time.sleep(0.1)
    return Stack(launcher, prefill, engines, router, url)


@pytest.fixture
def stack_factory(fresh_launcher: Launcher) -> Iterator[Callable[[int], Stack]]:
    yield lambda decodes: start_stack(fresh_launcher, decodes)


def harness_args(url: str, *extra: str) -> list[str]:
    return ["--url", url, "--clients", "6", "--max-tokens", str(MAX_TOKENS), "--request-timeout", "20", *extra]


def measure(url: str, step: Callable[[], None]) -> rollout_load.Report:
    """The harness's load around `step`, run in a thread while the clients keep sending."""
    args, command = rollout_load.parse([*harness_args(url), "--", "rollout-step"])

    async def action() -> int:
        await asyncio.to_thread(step)
        return 0

    return asyncio.run(rollout_load.run(args, command, action))


def until_the_router_has_no_worker(url: str, timeout: float = 30.0) -> None:
    """Wait (bounded) until the router answers a request for itself with 503 + Retry-After (no worker left to
    route to): when that shows after a worker died depends on the router's health checks and the machine's load."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            answer = httpx.post(
                url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}}, timeout=10
            )
            if answer.status_code == 503 and answer.headers.get("Retry-After"):
                return
            last = f"{answer.status_code} {answer.text[:200]}"
        except httpx.HTTPError as e:
            last = repr(e)
        time.sleep(0.1)
    raise AssertionError(f"the router did not answer 503 + Retry-After within {timeout:.0f} s: {last}")


def answered_during(result: rollout_load.Report, kind: str) -> list[rollout_load.Outcome]:
    """The requests that ended as `kind` while the step (the command) ran."""
    return [o for o in result.outcomes if o.kind == kind and result.command_start < o.end < result.command_end]


def drain_aware_restart(stack: Stack, index: int, max_running: int, timings: dict[str, float]) -> None:
    """What the playbook does for one decode engine, step by step."""
    decode = stack.decodes[index]
    started = time.monotonic()
    out = rollout.take_out(stack.url, decode.url, timeout=30, interval=0.2)
    assert out["changed"], out
    timings["idle_at"] = rollout.wait_idle(decode.url, timeout=30, interval=0.1)["in_flight_at_start"]
    stack.restart_decode(index, max_running)
    rollout.probe_generation(decode.url, "decode", timeout=10)
    rollout.put_back(stack.url, out["spec"], timeout=60, interval=0.2)
    timings["window"] = time.monotonic() - started


def test_steady_stack_loses_nothing_through_the_command_line(
    stack_factory: Callable[[int], Stack], tmp_path: Path
) -> None:
    stack = stack_factory(1)
    report = tmp_path / "report.json"
    cmd = [sys.executable, str(REPO / "bench/rollout_load.py"), *harness_args(stack.url, "--json", str(report))]
    done = subprocess.run([*cmd, "--", "sleep", "1"], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lost 0 of " in done.stdout, done.stdout
    body = rollout_load.json.loads(report.read_text())
    assert body["total"] > 6 and body["histogram"] == {"200": body["total"]}, body["histogram"]


def test_a_router_that_goes_away_is_counted_as_lost(stack_factory: Callable[[int], Stack]) -> None:
    """Killing the router (what a plain restart of it looks like to a client): refused connections are lost."""
    stack = stack_factory(1)
    result = measure(stack.url, lambda: (stack.router.kill(), time.sleep(1.0)) and None)
    assert result.histogram.get("connection refused", 0) > 0, result.histogram
    assert result.lost >= result.histogram["connection refused"], result.histogram
    assert f"lost {result.lost} of {result.total} (more than the 0 allowed)" in rollout_load.render(result, 0)


def test_an_engine_that_dies_is_answered_503_retry_after_by_the_router(stack_factory: Callable[[int], Stack]) -> None:
    """smg 1.13.0 answers for a dead decode engine with 503 no_available_workers and Retry-After: explicit."""
    stack = stack_factory(1)

    def engine_dies() -> None:
        stack.decodes[0].kill()
        until_the_router_has_no_worker(stack.url)

    result = measure(stack.url, engine_dies)
    assert result.histogram.get("503 + Retry-After (no_available_workers)", 0) > 0, result.histogram


def test_drain_aware_restart_of_one_of_two_decode_engines_loses_nothing(
    stack_factory: Callable[[int], Stack],
) -> None:
    stack = stack_factory(2)
    timings: dict[str, float] = {}
    result = measure(stack.url, lambda: drain_aware_restart(stack, 0, 48, timings))
    assert result.lost == 0 and set(result.histogram) == {"200"}, result.histogram
    # The other engine served while this one was out (the step lasts at least smg's drain settle window, each
    # request about half a second); how many depends on the machine's speed: a figure, printed below.
    assert answered_during(result, "200"), result.histogram
    info = httpx.get(stack.decodes[0].url + "/server_info").json()
    assert info["max_running_requests"] == 48
    print(rollout_load.render(result, 0))


def test_restart_of_the_only_decode_engine_is_a_controlled_outage(stack_factory: Callable[[int], Stack]) -> None:
    """No request in flight is aborted, no connection fails: new requests get 503 + Retry-After until the
    engine is back, and the window is measured."""
    stack = stack_factory(1)
    timings: dict[str, float] = {}
    result = measure(stack.url, lambda: drain_aware_restart(stack, 0, 48, timings))
    print(rollout_load.render(result, 0), f"\nrollout window {timings['window']:.2f} s")
    assert result.lost == 0, result.histogram
    assert set(result.histogram) <= {"200", "503 + Retry-After (no_available_workers)"}, result.histogram
    assert result.histogram.get("503 + Retry-After (no_available_workers)", 0) > 0, (
        "the window should have been seen by the clients"
    )
    # The clients see the outage end up to one Retry-After (1 s) after the engine is back, plus the first
    # generation through it: about the rollout's own window plus two seconds on an idle machine. How much more a
    # loaded machine adds is not a guarantee: a figure, printed, not asserted.
    window = result.window()
    assert window is not None and window[0] > 0, (window, timings)
    print(f"clients' window {window[0]:.2f} s, rollout window {timings['window']:.2f} s "
          f"(+{window[0] - timings['window']:.2f} s)")  # fmt: skip
    # The outage ended: the restarted engine serves through the router.
    answer = httpx.post(
        stack.url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 4}}, timeout=30
    )
    assert answer.status_code == 200, answer.text


def test_declared_workers_a_stopped_rollout_left_out_are_put_back(stack_factory: Callable[[int], Stack]) -> None:
    """A rollout stopped after taking engines out (one still draining, one gone): the declared specs, as the router
    role builds them, register both again with the real router, which then routes to every worker."""
    stack = stack_factory(1)
    bport = next(w["bootstrap_port"] for w in rollout.workers(stack.url) if w["worker_type"] == "prefill")
    declared = {
        "prefill": [{"url": stack.prefill.url, "bootstrap_port": bport}],
        "decode": [{"url": stack.decodes[0].url}],
    }
    specs = router_worker_specs(declared)
    rollout.take_out(stack.url, stack.prefill.url, timeout=30, interval=0.2)
    prefill_gone = {w["url"] for w in rollout.workers(stack.url)}
    decode = rollout.find_worker(stack.url, stack.decodes[0].url)
    assert decode is not None
    answer = rollout.call("DELETE", f"{stack.url}/workers/{decode['id']}")
    assert answer.status == 202, answer
    # smg turns the worker draining a moment after its 202, and drops it after its drain settle window.
    rollout.poll(
        lambda: (w := rollout.find_worker(stack.url, stack.decodes[0].url)) is None or w["status"] == "draining",
        10,
        0.05,
        "the router draining the decode worker",
    )
    assert stack.prefill.url not in prefill_gone
    # The router role's task: the module with every declared worker, in one call.
    worker_module = load_library("sglang_router_worker")
    args = {"router": stack.url, "state": "present", "workers": specs, "timeout": 60, "interval": 0.2}
    result = run_module(worker_module, args)
    assert result["changed"] and not result.get("failed"), result
    listed = {w["url"]: w for w in rollout.workers(stack.url)}
    assert {s["url"] for s in specs} <= set(listed) and all(rollout.serving(listed[s["url"]]) for s in specs)
    assert listed[stack.prefill.url]["bootstrap_port"] == bport
    assert httpx.get(stack.url + "/readiness", timeout=5).json().get("healthy_workers") == 2
    # The deploy's read of the router asks /readiness the same way (sglang_layers_info's health_url).
    readiness = probe(stack.url + "/readiness")
    assert readiness["status"] == 200 and readiness["json"]["healthy_workers"] == 2, readiness
    again = run_module(worker_module, {**args, "timeout": 10})
    assert not again["changed"] and not again.get("failed"), again
    checked = run_module(worker_module, {**args, "_ansible_check_mode": True})
    assert not checked["changed"], checked


def test_the_worker_module_in_check_mode_and_on_a_worker_already_draining(
    stack_factory: Callable[[int], Stack],
) -> None:
    """Check mode reports the change and leaves the router as it was, both ways. A take-out asked again while the
    router still drains the worker (a rollout stopped mid-drain, then rerun) waits until the worker is gone."""
    stack = stack_factory(2)
    url = stack.decodes[0].url
    worker_module = load_library("sglang_router_worker")
    absent = {"router": stack.url, "url": url, "state": "absent", "timeout": 60, "interval": 0.2}
    checked = run_module(worker_module, {**absent, "_ansible_check_mode": True})
    assert checked["changed"] and not checked.get("failed"), checked
    listed = rollout.find_worker(stack.url, url)
    assert listed is not None and rollout.serving(listed)

    answer = rollout.call("DELETE", f"{stack.url}/workers/{listed['id']}")
    assert answer.status == 202, answer
    rollout.poll(
        lambda: (w := rollout.find_worker(stack.url, url)) is None or w["status"] == "draining",
        10,
        0.05,
        "the router draining the decode worker",
    )
    again = run_module(worker_module, absent)
    # The draining worker is still listed: the take-out returns its spec, which the put-back needs.
    assert not again.get("failed") and again["spec"] == {"url": url, "worker_type": "decode"}, again
    assert rollout.find_worker(stack.url, url) is None

    present = {"router": stack.url, "state": "present", "spec": {"url": url, "worker_type": "decode"}, "timeout": 60,
               "interval": 0.2}  # fmt: skip
    checked = run_module(worker_module, {**present, "_ansible_check_mode": True})
    assert checked["changed"] and rollout.find_worker(stack.url, url) is None, checked
    assert run_module(worker_module, present)["changed"]
    back = rollout.find_worker(stack.url, url)
    assert back is not None and rollout.serving(back)
