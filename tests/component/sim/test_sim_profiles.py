"""Load and fault profiles: set at start (SGLANG_SIM_PROFILE) and switched at runtime (POST /sim/profile)."""

from __future__ import annotations

import time

import httpx
import pytest
from sglang_sim.profiles import ProfileError, parse
from simtools import Launcher, Sim

FLAGS = ["--context-length", "8192", "--max-running-requests", "16", "--enable-metrics", "--disaggregation-mode"]
ENV = {"SGLANG_SIM_TTFT_MS": "20", "SGLANG_SIM_TOKENS_PER_SEC": "50", "SGLANG_SIM_STEP_MS": "20"}


def _metric(sim: Sim, name: str) -> float:
    text = httpx.get(sim.url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.split("{", 1)[0] == name)


def _until(check: object, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not met within the timeout")


def test_parse_rejects_unknown_names_and_parameters() -> None:
    assert parse("kv_fill").kv_fill == pytest.approx(0.98)
    assert parse({"profile": "load", "load": 3}).load == 3
    with pytest.raises(ProfileError, match="profile='x' is not a simulator profile"):
        parse("x")
    with pytest.raises(ProfileError, match="loud=1: not a profile parameter"):
        parse({"profile": "load", "loud": 1})
    with pytest.raises(ProfileError, match=r"kv_fill=1.5: must lie in \[0, 1\)"):
        parse({"profile": "kv_fill", "kv_fill": 1.5})


def test_profiles_switch_at_runtime(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim([*FLAGS, "decode"], {**ENV, "SGLANG_SIM_PROFILE": "kv_fill"})
    pool = _metric(sim, "sglang:max_total_num_tokens")
    assert _metric(sim, "sglang:num_used_tokens") >= 0.97 * pool

    r = httpx.post(sim.url + "/sim/profile", json={"profile": "decode_stall"}, timeout=5)
    assert r.status_code == 200 and r.json()["stall"] is True
    _until(lambda: _metric(sim, "sglang:num_running_reqs") == 4)
    before = _metric(sim, "sglang:generation_tokens_total")
    time.sleep(1.0)
    assert _metric(sim, "sglang:generation_tokens_total") == before
    assert httpx.get(sim.url + "/health", timeout=5).status_code == 200

    httpx.post(sim.url + "/sim/profile", json={"profile": "bootstrap_fail"}, timeout=5)
    _until(lambda: _metric(sim, "sglang:num_bootstrap_failed_reqs_total") > 0)

    httpx.post(sim.url + "/sim/profile", json={"profile": "load", "load": 2}, timeout=5)
    _until(lambda: _metric(sim, "sglang:generation_tokens_total") > before)
    assert httpx.get(sim.url + "/sim/profile", timeout=5).json()["name"] == "load"
    bad = httpx.post(sim.url + "/sim/profile", json={"profile": "nope"}, timeout=5)
    assert bad.status_code == 400 and "known: normal" in bad.json()["error"]


def test_bad_profile_at_start_names_the_variable(fresh_launcher: Launcher) -> None:
    sim = fresh_launcher.sim([*FLAGS, "decode"], {**ENV, "SGLANG_SIM_PROFILE": "nope"}, wait=False)
    sim.popen.wait(20)
    assert sim.popen.returncode != 0
    assert "SGLANG_SIM_PROFILE: profile='nope'" in sim.log()
