"""`sglang-envelope bench` without a fleet: its options, the refusal of a router that is not a lab host, where it
sends, the simulator's speed factor, and the table, JSON and chart built from a real bench_serving result.

bench_serving_result.jsonl is the output file SGLang 0.5.23's bench_serving wrote in a real run through the runner
(`sglang-envelope bench -i inventories/lab --url <smg> --want 4x300 --output-tokens 100 --concurrency 4,1`, level
1: 4 calls of 200 + 100 tokens) against two simulators (prefill, decode) behind the real smg 1.13.0 router, as
tests/component/bench/test_bench_serving.py runs it. The predictions come from a stub step source of hand-set step
times (every prefill pass 1,000 ms, every decode step 10 ms, no attention time, so no bf16 index-key term)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import xml.dom.minidom
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import DecodeQuery, PrefillQuery, StepTime
from modeltools import load_model
from sglang_envelope_cli import bench
from sglang_envelope_cli.commands import main
from shipped import shipped_inventory

RESULT = json.loads((Path(__file__).with_name("bench_serving_result.jsonl")).read_text().splitlines()[-1])
DSV4 = load_model("deepseek-v4-flash")
WAVE = bench.Level("4x300", concurrency=4, prompts=4, isl=200, osl=100)


class Stub:
    def prefill(self, queries: Sequence[PrefillQuery]) -> list[StepTime]:
        return [StepTime(1000.0, 1000.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Sequence[DecodeQuery]) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


def row(rows: Sequence[dict[str, Any]], figure: str) -> dict[str, Any]:
    return next(r for r in rows if r["figure"] == figure)


# ---------------------------------------------------------------- options


def test_concurrency_levels_parse_highest_first_once() -> None:
    assert bench.parse_concurrency("64,8,1") == [64, 8, 1]
    assert bench.parse_concurrency("1, 64,8,64") == [64, 8, 1]
    for bad in ("0", "8,-1", "eight", ""):
        with pytest.raises(bench.BenchError, match="--concurrency"):
            bench.parse_concurrency(bad)
    assert bench.default_levels(64) == [64, 16, 1]
    assert bench.default_levels(3) == [3, 1]


def test_levels_default_to_the_typical_call_at_the_router_admission() -> None:
    hostvars, groups = shipped_inventory("lab")
    levels = bench.plan_levels(hostvars, groups, DSV4, [], perf.DEFAULT_OUTPUT_TOKENS)
    assert [lv.concurrency for lv in levels] == [64, 16, 1]  # the router's max_concurrent_requests, /4, 1
    assert {(lv.isl, lv.osl) for lv in levels} == {(perf.TYPICAL_TOKENS - 1000, 1000)}
    assert all(lv.prompts == lv.concurrency for lv in levels)
    assert levels[0].shape == "the audit's typical call: 32,768 tokens"


def test_levels_of_a_want_with_declared_workload_and_overrides() -> None:
    hostvars, groups = shipped_inventory("lab")
    levels = bench.plan_levels(hostvars, groups, DSV4, ["8x4k", "2x300"], 100)
    assert [(lv.shape, lv.concurrency, lv.isl, lv.osl) for lv in levels] == [
        ("8x4k", 8, 3900, 100),
        ("8x4k", 2, 3900, 100),
        ("8x4k", 1, 3900, 100),
        ("2x300", 2, 200, 100),
        ("2x300", 1, 200, 100),
    ]
    levels = bench.plan_levels(hostvars, groups, DSV4, ["8x4k"], 100, [4, 1], prompts=6)
    assert [(lv.concurrency, lv.prompts) for lv in levels] == [(4, 6), (1, 6)]
    hostvars["lab1"]["sglang_workload"] = {"p90_context_tokens": 20_000}
    (top, *_rest) = bench.plan_levels(hostvars, groups, DSV4, [], 1000)
    assert (top.shape, top.isl, top.concurrency) == ("sglang_workload.p90_context_tokens: 20,000 tokens", 19_000, 64)


def test_the_cli_parses_bench_options(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake(args: Any, *_rest: Any) -> int:
        seen.update(vars(args))
        return 0

    monkeypatch.setattr(bench, "bench_command", fake)
    argv = ["bench", "-i", "inventories/lab", "--want", "4x300", "--want", "2x1k", "--output-tokens", "100"]
    assert main([*argv, "--concurrency", "4,1", "--prompts", "8", "--url", "http://127.0.0.1:9"]) == 0
    assert seen["want"] == ["4x300", "2x1k"] and seen["output_tokens"] == 100 and seen["concurrency"] == "4,1"
    assert (seen["prompts"], seen["url"], seen["production_load_ok"], seen["tokenizer"]) == (
        8,
        "http://127.0.0.1:9",
        False,
        None,
    )


# ---------------------------------------------------------------- where it sends, and where it refuses to


def test_a_router_outside_the_lab_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--inventory", "inventories/production"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "error: inventories/production: router gpu-node-01 is not a lab host (group sglang_lab_hosts)"
    )
    assert "fix: use a lab inventory, or pass --production-load-ok" in err
    _hostvars, groups = shipped_inventory("multinode")
    assert "router router-01 is not a lab host" in str(bench.refusal("inventories/multinode", groups))
    assert bench.refusal("inventories/lab", shipped_inventory("lab")[1]) is None


def test_real_engines_need_their_tokenizer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "-i", "inventories/production", "--production-load-ok", "--want", "4x300"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: inventories/production: the engines are not the simulator, whose tokenizer bench generates; fix: pass "
        "--tokenizer with the served model's tokenizer directory\n"
    )


def test_the_router_is_reached_in_its_lab_namespace_else_at_its_address() -> None:
    assert bench.router_target(*shipped_inventory("lab")) == bench.Target("lab1", "http://127.0.0.1:8000", "lab1")
    assert bench.router_target(*shipped_inventory("production")) == bench.Target(
        "gpu-node-01", "http://gpu-node-01:8000", None
    )
    hostvars, groups = shipped_inventory("multinode")
    assert bench.router_target(hostvars, groups).url == "http://router-01:8000"
    hostvars["router-01"]["sglang_advertise_host"] = "10.0.0.5"
    assert bench.router_target(hostvars, groups).url == "http://10.0.0.5:8000"
    hostvars["router-01"]["sglang_router"] = {**hostvars["router-01"]["sglang_router"], "host": "10.0.0.6"}
    assert bench.router_target(hostvars, groups).url == "http://10.0.0.6:8000"
    hostvars["router-01"]["sglang_router"]["host"] = "127.0.0.1"
    with pytest.raises(bench.BenchError, match=r"listens on 127\.0\.0\.1 only"):
        bench.router_target(hostvars, groups)
    assert bench.router_target(hostvars, groups, "http://127.0.0.1:9/") == bench.Target(
        "router-01", "http://127.0.0.1:9", None
    )


def test_the_router_key_comes_from_the_inventory_or_the_environment() -> None:
    hostvars, _groups = shipped_inventory("lab")
    assert bench.router_api_key(hostvars, "lab1", {}) == "lab-test-key-not-secret"
    assert bench.router_api_key(hostvars, "lab1", {"SGLANG_API_KEY": "other"}) == "other"
    hostvars["lab1"]["sglang_api_key"] = "{{ vault_sglang_api_key }}"
    with pytest.raises(bench.BenchError, match="export SGLANG_API_KEY"):
        bench.router_api_key(hostvars, "lab1", {})
    assert bench.router_api_key(shipped_inventory("production")[0], "gpu-node-01", {}) is None


# ---------------------------------------------------------------- the simulator's time scale


def simulated(factor: Any, command: Any = ("/opt/venv/bin/python", "-m", "sglang_sim")) -> tuple[Any, Any]:
    hostvars, groups = shipped_inventory("lab")
    hv = hostvars["lab1"]
    hv["sglang_engine_command"] = list(command) if isinstance(command, tuple) else command
    env = {k: v for k, v in (hv.get("sglang_engine_extra_env") or {}).items() if k != "SGLANG_SIM_SPEED_FACTOR"}
    hv["sglang_engine_extra_env"] = env if factor is None else {**env, "SGLANG_SIM_SPEED_FACTOR": factor}
    return hostvars, groups


def test_sim_speed_factor() -> None:
    assert perf.sim_speed_factor(*simulated("0.5")) == 0.5
    assert perf.sim_speed_factor(*simulated(2)) == 2.0
    assert perf.sim_speed_factor(*simulated("0.5", "python -m sglang_sim")) == 0.5
    assert perf.sim_speed_factor(*simulated(None)) is None
    assert perf.sim_speed_factor(*simulated("0.5", ["/opt/sglang/current/venv/bin/sglang", "serve"])) is None
    assert perf.sim_speed_factor(*shipped_inventory("production")) is None
    for bad in ("fast", "0", "-1", "nan"):
        with pytest.raises(ValueError, match=r"SGLANG_SIM_SPEED_FACTOR=.* is not a number > 0"):
            perf.sim_speed_factor(*simulated(bad))
    hostvars, groups = simulated("0.5")
    hostvars["lab2"] = copy.deepcopy(hostvars["lab1"])
    hostvars["lab2"]["sglang_engine_extra_env"]["SGLANG_SIM_SPEED_FACTOR"] = "0.25"
    groups = {**groups, "sglang_decode": ["lab2"]}
    with pytest.raises(ValueError, match=r"different SGLANG_SIM_SPEED_FACTORs \(lab1 0\.5, lab2 0\.25\)"):
        perf.sim_speed_factor(hostvars, groups)


# ---------------------------------------------------------------- measured beside predicted


def predicted(steps: Any = None) -> dict[str, Any]:
    hostvars, groups = shipped_inventory("lab")
    (one,) = bench.predict_levels(hostvars, groups, DSV4, [WAVE], Stub() if steps is None else steps)
    return one


def test_rows_from_a_real_bench_serving_result() -> None:
    pred = predicted()
    # 4 prompts of 200 tokens fit one prefill pass (1,000 ms; the KV transfer adds 0.05 ms); decode 10 ms a step
    assert pred["ttft_p50"]["ms"] == pytest.approx(1000.0, abs=0.1)
    rows = bench.compare(WAVE, RESULT, pred)
    assert [r["figure"] for r in rows] == [
        "TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p90", "ITL p99", "E2E p50", "output tok/s", "errors",
    ]  # fmt: skip
    assert row(rows, "TTFT p50")["measured"] == RESULT["median_ttft_ms"]
    assert row(rows, "TTFT p50")["ratio"] == pytest.approx(RESULT["median_ttft_ms"] / 1000.0, rel=1e-3)
    assert row(rows, "ITL p50")["ratio"] == pytest.approx(RESULT["median_itl_ms"] / 10.0)
    assert row(rows, "ITL p90")["measured"] == RESULT["p90_itl_ms"]
    for p99 in ("TTFT p99", "ITL p99"):
        assert row(rows, p99)["predicted"] is None and row(rows, p99)["source"] == "the model has no p99"
    e2e = row(rows, "E2E p50")
    assert e2e["predicted"] == pytest.approx(1000.0 + 99 * 10.0, abs=0.1)
    assert e2e["measured"] == RESULT["median_e2e_latency_ms"] and "TTFT p50 + (OSL-1) x ITL p50" in e2e["source"]
    assert row(rows, "output tok/s")["predicted"] == pytest.approx(4 * 100 * 1000 / 1990.0, rel=1e-3)
    assert row(rows, "output tok/s")["measured"] == RESULT["output_throughput"]
    assert (row(rows, "errors")["measured"], row(rows, "errors")["predicted"]) == (0, 0)
    lines = bench.render_rows(rows)
    assert lines[0].split() == ["figure", "measured", "predicted", "band", "ratio", "source"]
    assert len(lines) == 10 and "—" in lines[3]
    assert lines[1].startswith("TTFT p50") and "1.00 s" in lines[1] and "0.49-1.51 s" in lines[1]


def test_the_simulator_speed_factor_scales_the_prediction() -> None:
    rows = bench.compare(WAVE, RESULT, predicted(), factor=0.5)
    assert row(rows, "TTFT p50")["predicted"] == pytest.approx(2000.0, abs=0.2)
    assert row(rows, "ITL p50")["predicted"] == pytest.approx(20.0)
    assert row(rows, "ITL p50")["high"] == pytest.approx(2 * 10.0 * 1.31)
    assert row(rows, "output tok/s")["predicted"] == pytest.approx(4 * 100 * 1000 / 3980.0, rel=1e-3)


def test_without_the_estimator_the_measurements_stand_alone() -> None:
    hostvars, groups = shipped_inventory("lab")
    (pred,) = bench.predict_levels(hostvars, groups, DSV4, [WAVE], None)
    assert pred == {"error": perf.NOT_PREDICTED}
    rows = bench.compare(WAVE, RESULT, pred)
    assert all(r["predicted"] is None and r["ratio"] is None for r in rows)
    assert all(r["source"] == "time: not predicted (make perf-venv)" for r in rows)
    assert row(rows, "TTFT p90")["measured"] == RESULT["p90_ttft_ms"]


def test_the_json_report_and_the_chart() -> None:
    target = bench.Target("lab1", "http://127.0.0.1:8000", "lab1")
    levels = [WAVE, dataclasses.replace(WAVE, concurrency=1, prompts=1)]
    failed = {**RESULT, "completed": 0, "median_ttft_ms": math.nan}  # a wave with no completed call
    doc, lines = bench.report(
        "inventories/lab", target, levels, [RESULT, failed], [predicted(), predicted()], 0.5, ["note"], {"x": 1}
    )
    text = json.dumps(bench.plain(doc), allow_nan=False)
    back = json.loads(text)
    assert back["router"] == {"host": "lab1", "url": "http://127.0.0.1:8000", "netns": "lab1"}
    assert back["speed_factor"] == 0.5 and back["x"] == 1
    first = back["levels"][0]
    assert first["result"]["itls"] == RESULT["itls"] and first["predicted"]["ttft_p50"]["ms"] > 0
    assert row(first["rows"], "TTFT p50")["predicted"] == pytest.approx(2000.0, abs=0.2)
    assert back["levels"][1]["result"]["median_ttft_ms"] is None
    assert row(back["levels"][1]["rows"], "errors")["measured"] == 1
    assert "level 1/2: 4x300: 4 call(s) of 200 in + 100 out at once" in lines
    svg = bench.bench_svg("lab: 4x300", [{"concurrency": e["concurrency"], "rows": e["rows"]} for e in back["levels"]])
    xml.dom.minidom.parseString(svg)
    assert "TTFT p50 measured" in svg and "ITL p50 predicted (band shaded)" in svg and "<polygon" in svg


def test_bench_serving_command_line() -> None:
    argv = bench.bench_argv(WAVE, "http://127.0.0.1:8000", "/tok", Path("/out/level-1.jsonl"))
    for flag, value in [
        ("--backend", "sglang"),
        ("--dataset-name", "random-ids"),
        ("--random-input-len", "200"),
        ("--random-output-len", "100"),
        ("--num-prompts", "4"),
        ("--max-concurrency", "4"),
        ("--random-range-ratio", "1"),
        ("--tokenizer", "/tok"),
        ("--output-file", "/out/level-1.jsonl"),
    ]:
        assert argv[argv.index(flag) + 1] == value
    assert {"--tokenize-prompt", "--pd-separated", "--output-details"} <= set(argv)
    # prompts of their own per wave, no warm-up: nothing of the wave is in the prefix cache before it
    assert argv[argv.index("--warmup-requests") + 1] == "0" and argv[argv.index("--seed") + 1] == "1"
    other = bench.bench_argv(WAVE, "http://127.0.0.1:8000", "/tok", Path("/o"), seed=7)
    assert other[other.index("--seed") + 1] == "7"
    assert argv[argv.index("--request-rate") + 1] == "inf"
