"""The alerts fire on what the simulator really exposes: a decode engine started with the lab's declared envelope
runs each load/fault profile (switched at runtime), its /metrics page is scraped, and the scrapes become the input
series of a promtool test of the generated rules. The TTFT SLO alert reads the decode engine's own TTFT histogram:
calls whose first token comes after the SLO (SGLANG_SIM_TTFT_MS past it) fire it, quick ones do not.

Scrape i is minute i of the test; afterwards the profile is taken to go on as observed (promtools.series_from_scrapes).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import engine_envelope
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import to_argv, to_environ
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    ENGINE_JOB,
    RULES_FILE,
    Alert,
    Policy,
    all_alerts,
    fleet,
    rule_file,
)
from promtools import expectation, run_promtool, series_from_scrapes, write
from sglang_envelope_cli.commands import model_config_for
from simtools import Launcher, Sim, free_port

SERVER = "lab1:decode"
SCRAPES = 4
HOLD_MIN = 10
WATCHED = (
    "SGLangKVPoolNearFull",
    "SGLangKVPoolFull",
    "SGLangDecodeStalled",
    "SGLangBootstrapFailures",
    "SGLangContextLengthDrift",
    "SGLangKVPoolDrift",
    "SGLangTTFTAboveSLO",
)
TIMING = {"SGLANG_SIM_TTFT_MS": "20", "SGLANG_SIM_TOKENS_PER_SEC": "50", "SGLANG_SIM_STEP_MS": "20"}
TTFT_SLO_S = 1.0
SLOW_FIRST_TOKEN_MS = "1200"  # calls in SGLang's (1, 2] s bucket: a p99 near 2 s
# Calls that end at their first token, kept in flight: a first token every SLOW_FIRST_TOKEN_MS (plus the scripted
# load's refill), so each scrape EVERY_S apart sees new ones.
CHURN = {"profile": "load", "load": 8, "output_tokens": 1}
EVERY_S = 2.0


def _decode_sim(
    launcher: Launcher, hostvars: dict[str, Any], model_dir: Path, timing: dict[str, str] | None = None, **changes: Any
) -> Sim:
    """The lab's decode engine as the deploy renders it, on a free loopback port; `changes` edit its envelope,
    `timing` the simulator's fixed pace."""
    env = engine_envelope("decode", hostvars)
    env.update(model_path=str(model_dir), host="127.0.0.1", port=free_port(), **changes)
    environ = {
        **to_environ("decode", env),
        **TIMING,
        **(timing or {}),
        "SGLANG_SIM_GPU_MEMORY_GIB": str(hostvars["sglang_gpu_memory_gib"]),
    }
    if not env.get("bf16_index_k"):
        environ["SGLANG_DSV4_BF16_INDEX_K"] = "0"
    argv = [sys.executable, "-m", "sglang_sim", "serve", *to_argv("decode", env)]
    sim = Sim(env["port"], argv, launcher.logs / f"sim-{env['port']}.log", environ)
    launcher.procs.append(sim)
    sim.wait_healthy(20.0)
    return sim


def _scrape(sim: Sim, profile: dict[str, Any] | None, every: float = 1.0) -> list[str]:
    if profile is not None:
        r = httpx.post(sim.url + "/sim/profile", json=profile, timeout=5)
        assert r.status_code == 200, r.text
        time.sleep(1.0)
    pages = []
    for _ in range(SCRAPES):
        pages.append(httpx.get(sim.url + "/metrics", timeout=5).text)
        time.sleep(every)
    return pages


def _case(name: str, pages: list[str], firing: set[str], by_name: dict[str, Alert]) -> dict[str, Any]:
    labels = {"job": ENGINE_JOB, "server": SERVER}
    return {
        "name": name,
        "interval": "1m",
        "input_series": series_from_scrapes(pages, labels, HOLD_MIN),
        "alert_rule_test": [
            {
                "eval_time": f"{SCRAPES + HOLD_MIN - 1}m",
                "alertname": alert,
                "exp_alerts": [expectation(by_name[alert])] if alert in firing else [],
            }
            for alert in WATCHED
        ],
    }


def test_profiles_fire_their_alerts(
    launcher: Launcher, lab_inventory: Any, model_dir: Path, promtool: str, tmp_path: Path
) -> None:
    hostvars_all, groups = lab_inventory
    hostvars = hostvars_all["lab1"]
    alerts = all_alerts(fleet(hostvars_all, groups, model_config_for(hostvars)), Policy(ttft_p99_slo_s=TTFT_SLO_S))
    by_name = {a.name: a for group in alerts.values() for a in group if a.server == SERVER}

    sim = _decode_sim(launcher, hostvars, model_dir)
    cases = [
        _case("load: nothing fires", _scrape(sim, {"profile": "load", "load": 4}), set(), by_name),
        _case(
            "kv_fill 0.98: the pool alerts fire",
            _scrape(sim, {"profile": "kv_fill"}),
            {"SGLangKVPoolNearFull", "SGLangKVPoolFull"},
            by_name,
        ),
        _case(
            "kv_fill 0.93: only the warning fires",
            _scrape(sim, {"profile": "kv_fill", "kv_fill": 0.93}),
            {"SGLangKVPoolNearFull"},
            by_name,
        ),
        _case("decode_stall, /health 200", _scrape(sim, {"profile": "decode_stall"}), {"SGLangDecodeStalled"}, by_name),
        _case("bootstrap_fail", _scrape(sim, {"profile": "bootstrap_fail"}), {"SGLangBootstrapFailures"}, by_name),
        _case("first tokens in 20 ms: under the TTFT SLO", _scrape(sim, CHURN, EVERY_S), set(), by_name),
    ]
    assert httpx.get(sim.url + "/health", timeout=5).status_code == 200
    sim.terminate()
    context = engine_envelope("decode", hostvars)["context_length"] // 2
    shorter = _decode_sim(launcher, hostvars, model_dir, context_length=context)
    cases.append(
        _case("restarted with another context length", _scrape(shorter, None), {"SGLangContextLengthDrift"}, by_name)
    )
    shorter.terminate()
    fp8_keys = _decode_sim(launcher, hostvars, model_dir, bf16_index_k=False)
    cases.append(_case("restarted without bf16 index keys", _scrape(fp8_keys, None), {"SGLangKVPoolDrift"}, by_name))
    fp8_keys.terminate()
    slow = _decode_sim(launcher, hostvars, model_dir, {"SGLANG_SIM_TTFT_MS": SLOW_FIRST_TOKEN_MS})
    cases.append(
        _case(
            f"first tokens in {SLOW_FIRST_TOKEN_MS} ms: over the TTFT SLO",
            _scrape(slow, CHURN, EVERY_S),
            {"SGLangTTFTAboveSLO"},
            by_name,
        )
    )

    write(tmp_path / RULES_FILE, rule_file(alerts))
    write(tmp_path / "sim_test.yml", {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": cases})
    tested = run_promtool(promtool, "test", "rules", "sim_test.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
