"""`sglang-envelope bench`'s pure parts pinned whole: where it sends and what it refuses, the waves it plans, each
measured figure beside its prediction (rows, the printed table) and the chart, from hand-set results and
predictions whose figures are round numbers, so every expected value below is worked out by hand."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import StepTime
from modeltools import load_model
from sglang_envelope_cli import bench
from shipped import shipped_inventory

DSV4 = load_model("deepseek-v4-flash")
DASH = "—"
E2E = "TTFT p50 + (OSL-1) x ITL p50 (the model has no E2E of its own)"
TPUT = "the wave's output over the model's TTFT p90 + (OSL-1) x ITL p50"
QUEUE = "calls the router's queue refuses"
NO_P99 = "the model has no p99"
FIGURES = ("TTFT p50", "TTFT p90", "TTFT p99", "ITL p50", "ITL p90", "ITL p99", "E2E p50", "output tok/s", "errors")
UNITS = ("ms", "ms", "ms", "ms", "ms", "ms", "ms", "tok/s", "calls")

# one wave of 4 calls of 101 output tokens: OSL-1 = 100 ITL steps; the wave's output is 4 x 101 = 404 tokens
WAVE = bench.Level("4x300", concurrency=4, prompts=4, isl=200, osl=101)
PRED: dict[str, Any] = {
    "binding": "decode engine",
    "decode_batch": 4.0,
    "rejected": 2,
    "ttft_p50": {"ms": 600.0, "low_ms": 300.0, "high_ms": 900.0, "source": "prefill model"},
    "ttft_p90": {"ms": 1000.0, "low_ms": 500.0, "high_ms": 2000.0, "source": "prefill model p90"},
    "itl_p50": {"ms": 10.0, "low_ms": 5.0, "high_ms": 20.0, "source": "decode model"},
    "itl_p90": {"ms": 20.0, "low_ms": 10.0, "high_ms": 40.0, "source": "decode model p90"},
}
RESULT: dict[str, Any] = {
    "completed": 3,
    "duration": 12.5,
    "median_ttft_ms": 900.0,
    "p90_ttft_ms": 1500.0,
    "p99_ttft_ms": 1700.5,
    "median_itl_ms": 15.0,
    "p90_itl_ms": 30.0,
    "p99_itl_ms": 45.25,
    "median_e2e_latency_ms": 2400.0,
    "output_throughput": 303.0,
}


def rows_of(*cells: tuple[Any, Any, Any, Any, Any, str]) -> list[dict[str, Any]]:
    """compare's rows from (measured, predicted, low, high, ratio, source) in FIGURES order."""
    return [
        {"figure": f, "unit": u, "measured": m, "predicted": p, "low": lo, "high": hi, "ratio": r, "source": s}
        for f, u, (m, p, lo, hi, r, s) in zip(FIGURES, UNITS, cells, strict=True)
    ]


# E2E p50: 600 + 100 x 10 = 1,600 (band 300 + 100 x 5 = 800 .. 900 + 100 x 20 = 2,900); output: 404,000 token-ms
# over TTFT p90 + 100 x ITL p50 = 1,000 + 1,000 = 2,000 ms: 202 tok/s (band 404,000 / 4,000 = 101 .. / 1,000 = 404)
ROWS = rows_of(
    (900.0, 600.0, 300.0, 900.0, 1.5, "prefill model"),
    (1500.0, 1000.0, 500.0, 2000.0, 1.5, "prefill model p90"),
    (1700.5, None, None, None, None, NO_P99),
    (15.0, 10.0, 5.0, 20.0, 1.5, "decode model"),
    (30.0, 20.0, 10.0, 40.0, 1.5, "decode model p90"),
    (45.25, None, None, None, None, NO_P99),
    (2400.0, 1600.0, 800.0, 2900.0, 1.5, E2E),
    (303.0, 202.0, 101.0, 404.0, 1.5, TPUT),
    (1.0, 2.0, None, None, None, QUEUE),
)
TABLE = [
    "figure           measured    predicted               band  ratio  source",
    "TTFT p50        900.00 ms    600.00 ms   300.00-900.00 ms   1.50  prefill model",
    "TTFT p90           1.50 s       1.00 s        0.50-2.00 s   1.50  prefill model p90",
    "TTFT p99           1.70 s            —                         —  the model has no p99",
    "ITL p50          15.00 ms     10.00 ms      5.00-20.00 ms   1.50  decode model",
    "ITL p90          30.00 ms     20.00 ms     10.00-40.00 ms   1.50  decode model p90",
    "ITL p99          45.25 ms            —                         —  the model has no p99",
    "E2E p50            2.40 s       1.60 s        0.80-2.90 s   1.50  " + E2E,
    "output tok/s  303.0 tok/s  202.0 tok/s  101.0-404.0 tok/s   1.50  " + TPUT,
    "errors                  1            2                         —  " + QUEUE,
]


# ---------------------------------------------------------------- the inventory


def test_a_wave_says_its_prompts_only_when_above_its_calls() -> None:
    assert WAVE.text() == "4 call(s) of 200 in + 101 out at once"
    assert bench.Level("s", 4, 5, 1200, 1000).text() == "4 call(s) of 1,200 in + 1,000 out at once, 5 prompts"


@pytest.mark.parametrize(
    ("inventory", "name"),
    [
        ("inventories/lab", "lab"),
        ("inventories/lab/hosts.yml", "lab"),
        ("inventories/lab/hosts.yaml", "lab"),
        ("inventories/lab/hosts.ini", "lab"),
        ("inventories/lab/hosts.YML", "hosts.YML"),
        ("inventories/lab.d", "lab.d"),
    ],
)
def test_the_inventory_name_is_its_folder_for_a_hosts_file(inventory: str, name: str) -> None:
    assert bench.inventory_name(inventory) == name


def test_the_routers_are_the_router_group() -> None:
    assert bench.routers({"sglang_router": ["r1", "r2"], "sglang_decode": ["d1"]}) == ["r1", "r2"]
    assert bench.routers({"sglang_decode": ["d1"]}) == []


def test_refusal_names_every_router_outside_the_lab_or_the_missing_router() -> None:
    tail = (
        " not a lab host (group sglang_lab_hosts), and bench puts full load on the router it measures; "
        "fix: use a lab inventory, or pass --production-load-ok to load this fleet on purpose"
    )
    assert bench.refusal("inv", {}) == "inv: no router is declared, so nothing is" + tail
    groups = {"sglang_router": ["r1", "r2", "r3"], "sglang_lab_hosts": ["r2"]}
    assert bench.refusal("inv", groups) == "inv: router r1, r3 is" + tail
    assert bench.refusal("inv", {"sglang_router": ["r1", "r2"], "sglang_lab_hosts": ["r2", "r1"]}) is None


def test_a_url_overrides_the_inventory_router() -> None:
    assert bench.router_target({}, {}, "http://10.0.0.1:9//") == bench.Target("(--url)", "http://10.0.0.1:9", None)
    # only slashes are trimmed: a path ending in X keeps it
    assert bench.router_target({}, {}, "http://10.0.0.1:9/poolX/").url == "http://10.0.0.1:9/poolX"
    groups = {"sglang_router": ["r1"]}
    assert bench.router_target({}, groups, "https://r/") == bench.Target("r1", "https://r", None)


def test_no_router_and_no_url_is_refused() -> None:
    with pytest.raises(bench.BenchError) as info:
        bench.router_target({}, {"sglang_decode": ["d1"]})
    assert str(info.value) == (
        "the inventory declares no host in sglang_router; fix: declare the router, or pass --url"
    )


def test_a_lab_router_is_reached_on_its_loopback_inside_its_namespace() -> None:
    groups = {"sglang_router": ["lab9"], "sglang_lab_hosts": ["lab9"]}
    hostvars: dict[str, Any] = {"lab9": {"ansible_host": "ns-lab9", "sglang_router": {"host": "10.0.0.7", "port": 81}}}
    assert bench.router_target(hostvars, groups) == bench.Target("lab9", "http://10.0.0.7:81", "ns-lab9")
    # no listen address: loopback; no port: smg's default 30000; no ansible_host: the namespace is the host's name
    assert bench.router_target({"lab9": {}}, groups) == bench.Target("lab9", "http://127.0.0.1:30000", "lab9")


def test_any_other_router_is_reached_at_its_listen_address_else_an_advertised_name() -> None:
    groups = {"sglang_router": ["r1"]}
    assert bench.router_target({"r1": {"sglang_router": {"host": "fd00::5", "port": 82}}}, groups) == bench.Target(
        "r1", "http://[fd00::5]:82", None
    )
    # no listen address is the wildcard: the advertised host, else ansible_host, else the name, never loopback
    hv: dict[str, Any] = {"ansible_host": "10.0.0.3"}
    assert bench.router_target({"r1": hv}, groups) == bench.Target("r1", "http://10.0.0.3:30000", None)
    hv["sglang_router"] = {"host": "::"}
    hv["sglang_advertise_host"] = "127.0.0.1"
    assert bench.router_target({"r1": hv}, groups).url == "http://10.0.0.3:30000"
    hv["ansible_host"] = "localhost"
    assert bench.router_target({"r1": hv}, groups).url == "http://r1:30000"
    local = {"sglang_router": {"host": "0.0.0.0"}, "ansible_host": "127.0.0.1"}
    assert bench.router_target({"localhost": local}, {"sglang_router": ["localhost"]}).url == "http://localhost:30000"


def test_a_router_on_loopback_only_is_refused() -> None:
    groups = {"sglang_router": ["r1"]}
    with pytest.raises(bench.BenchError) as info:
        bench.router_target({"r1": {"sglang_router": {"host": "::1"}}}, groups)
    assert str(info.value) == (
        "r1: the router listens on ::1 only, so it is not reachable from here; fix: run the bench on that host "
        "with --url"
    )


def test_the_router_key_prefers_the_router_own_key_and_skips_empty_ones() -> None:
    hostvars: dict[str, Any] = {"r1": {"sglang_router_api_key": "router-key", "sglang_api_key": "engine-key"}}
    assert bench.router_api_key(hostvars, "r1", {}) == "router-key"
    assert bench.router_api_key(hostvars, "r1", {"SGLANG_API_KEY": ""}) == "router-key"
    assert bench.router_api_key(hostvars, "r1", {"SGLANG_API_KEY": "env-key"}) == "env-key"
    hostvars["r1"]["sglang_router_api_key"] = ""
    assert bench.router_api_key(hostvars, "r1", {}) == "engine-key"
    hostvars["r1"]["sglang_router_api_key"] = None
    assert bench.router_api_key(hostvars, "r1", {}) == "engine-key"
    assert bench.router_api_key(hostvars, "elsewhere", {}) is None
    assert bench.router_api_key({"r1": {}}, "r1", {}) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sglang_router_api_key", "{% if x %}k{% endif %}"),
        ("sglang_router_api_key", "{{ vault_key }}"),
        ("sglang_api_key", {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256"}),
    ],
)
def test_a_vaulted_or_templated_key_is_not_read(name: str, value: Any) -> None:
    with pytest.raises(bench.BenchError) as info:
        bench.router_api_key({"r1": {name: value}}, "r1", {})
    assert str(info.value) == (
        f"r1: {name} is vaulted or templated, so its value is not read here; fix: export SGLANG_API_KEY=<key>"
    )


def test_simulated_engines_keep_the_model_time_with_a_step_table() -> None:
    assert bench.sim_keeps_model_time(*shipped_inventory("lab")) is True  # python -m sglang_sim, step table builtin
    assert bench.sim_keeps_model_time(*shipped_inventory("production")) is None
    sim = {"sglang_engine_command": "python -m sglang_sim", "sglang_engine_extra_env": {"SGLANG_SIM_STEP_TABLE": "x"}}
    plain_sim = {"sglang_engine_command": ["python", "-m", "sglang_sim"]}
    # only the decode group declared; a host of the group without hostvars is no simulator
    assert bench.sim_keeps_model_time({"d1": sim}, {"sglang_decode": ["d1", "ghost"]}) is True
    assert bench.sim_keeps_model_time({"p1": plain_sim}, {"sglang_prefill": ["p1"]}) is False
    both = {"sglang_prefill": ["p1"], "sglang_decode": ["d1"]}
    assert bench.sim_keeps_model_time({"p1": plain_sim, "d1": sim}, both) is False
    assert bench.sim_keeps_model_time({"p1": {"sglang_engine_command": None}, "d1": sim}, both) is True
    empty_env = {**sim, "sglang_engine_extra_env": {"SGLANG_SIM_STEP_TABLE": ""}}
    assert bench.sim_keeps_model_time({"d1": empty_env}, {"sglang_decode": ["d1"]}) is False
    lowercase = {**sim, "sglang_engine_extra_env": {"sglang_sim_step_table": "x"}}
    assert bench.sim_keeps_model_time({"d1": lowercase}, {"sglang_decode": ["d1"]}) is False
    other = {"sglang_engine_command": ["sglang", "serve"], "sglang_engine_extra_env": {"SGLANG_SIM_STEP_TABLE": "x"}}
    assert bench.sim_keeps_model_time({"d1": other}, {"sglang_decode": ["d1"]}) is None


# ---------------------------------------------------------------- what runs


def test_concurrency_spaces_are_dropped_before_the_numbers_are_read() -> None:
    assert bench.parse_concurrency("1 6, 8,,") == [16, 8]
    with pytest.raises(bench.BenchError) as info:
        bench.parse_concurrency("4,x")
    assert str(info.value) == "--concurrency '4,x': expected numbers separated by commas, e.g. 64,8,1"
    with pytest.raises(bench.BenchError) as info:
        bench.parse_concurrency("4,0")
    assert str(info.value) == "--concurrency '4,0': every level must be a number > 0"
    assert bench.default_levels(8) == [8, 2, 1]
    assert bench.default_levels(1) == [1]


def test_levels_without_a_router_cap_run_what_the_decode_fleet_holds_of_that_length() -> None:
    hostvars, groups = shipped_inventory("lab")
    del hostvars["lab1"]["sglang_router"]["max_concurrent_requests"]
    # 32,768-token calls: the decode engine's 64 running slots bind (full-length calls would fit only 21)
    levels = bench.plan_levels(hostvars, groups, DSV4, [], 1000)
    assert levels == [bench.Level("the audit's typical call: 32,768 tokens", c, c, 31_768, 1000) for c in (64, 16, 1)]


def test_a_declared_p90_context_above_what_the_fleet_serves_is_cut_to_it() -> None:
    hostvars, groups = shipped_inventory("lab")
    hostvars["lab1"]["sglang_workload"] = {"p90_context_tokens": 600_000}
    (top, *_rest) = bench.plan_levels(hostvars, groups, DSV4, [], 1000, [2], prompts=3)
    assert top == bench.Level("sglang_workload.p90_context_tokens: 524,286 tokens", 2, 3, 523_286, 1000)


class Fast:
    """Hand-set step times: a 1 ms prefill pass and a 10 ms decode step, so the decode batch fills."""

    def prefill(self, queries: Any) -> list[StepTime]:
        return [StepTime(1.0, 1.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]

    def decode(self, queries: Any) -> list[StepTime]:
        return [StepTime(10.0, 10.0, 0.0, 0.0, 0.0, "stub", "0.5.14") for _ in queries]


def test_the_prediction_runs_calls_of_the_whole_wave_length() -> None:
    hostvars, groups = shipped_inventory("lab")
    # 64 calls of 199,000 + 1,000 = 200,000 tokens: the KV pool holds 55 of them at once (56 of 198,000 tokens)
    (pred,) = bench.predict_levels(hostvars, groups, DSV4, [bench.Level("x", 64, 64, 199_000, 1000)], Fast())
    assert (pred["calls"], pred["isl"], pred["osl"], pred["decode_batch"]) == (64, 199_000, 1000, 55.0)


def test_a_fleet_the_model_cannot_time_gives_its_reason_per_wave() -> None:
    hostvars, groups = shipped_inventory("lab")
    groups = {k: v for k, v in groups.items() if k != "sglang_prefill"}
    why = "time: not predicted (the time model needs a prefill and a decode engine; fix: declare both groups)"
    assert bench.predict_levels(hostvars, groups, DSV4, [WAVE, WAVE], Fast()) == [{"error": why}, {"error": why}]


def test_bench_serving_is_sent_to_the_base_url() -> None:
    argv = bench.bench_argv(WAVE, "http://r:1", "/tok", bench.Path("/o.jsonl"), seed=5)
    assert argv == [
        "--seed", "5", "--warmup-requests", "0", "--backend", "sglang", "--base-url", "http://r:1",
        "--dataset-name", "random-ids", "--tokenize-prompt", "--random-range-ratio", "1",
        "--random-input-len", "200", "--random-output-len", "101", "--num-prompts", "4", "--max-concurrency", "4",
        "--request-rate", "inf", "--pd-separated", "--tokenizer", "/tok", "--output-file", "/o.jsonl",
        "--output-details",
    ]  # fmt: skip


# ---------------------------------------------------------------- measured beside predicted


def test_every_row_of_a_timed_wave() -> None:
    assert bench.compare(WAVE, RESULT, PRED) == ROWS
    assert bench.render_rows(ROWS) == TABLE


def test_the_speed_factor_divides_every_predicted_time_and_its_band() -> None:
    # x2 faster: TTFT p50 300 (150..450), p90 500 (250..1,000), ITL p50 5 (2.5..10), p90 10 (5..20);
    # E2E 300 + 500 = 800 (400..1,450); output 404,000 / (500 + 500) = 404 (202 .. 808)
    assert bench.compare(WAVE, RESULT, PRED, factor=2.0) == rows_of(
        (900.0, 300.0, 150.0, 450.0, 3.0, "prefill model"),
        (1500.0, 500.0, 250.0, 1000.0, 3.0, "prefill model p90"),
        (1700.5, None, None, None, None, NO_P99),
        (15.0, 5.0, 2.5, 10.0, 3.0, "decode model"),
        (30.0, 10.0, 5.0, 20.0, 3.0, "decode model p90"),
        (45.25, None, None, None, None, NO_P99),
        (2400.0, 800.0, 400.0, 1450.0, 3.0, E2E),
        (303.0, 404.0, 202.0, 808.0, 0.75, TPUT),
        (1.0, 2.0, None, None, None, QUEUE),
    )


def test_more_prompts_than_one_wave_have_no_predicted_throughput() -> None:
    level = bench.Level("4x300", concurrency=4, prompts=6, isl=200, osl=101)
    no_rejects = {k: v for k, v in PRED.items() if k != "rejected"}
    rows = bench.compare(level, {"completed": "6", "output_throughput": math.inf}, no_rejects)
    expected = rows_of(
        *[(None, None, None, None, None, "")] * 6,
        (None, 1600.0, 800.0, 2900.0, None, E2E),
        (None, None, None, None, None, "more prompts than one wave: the model predicts one wave"),
        (0.0, 0.0, None, None, None, QUEUE),
    )
    assert rows[6:] == expected[6:]


def test_an_untimed_wave_gives_the_reason_as_every_source() -> None:
    why = "time: not predicted (make perf-venv)"
    rows = bench.compare(WAVE, None, {"error": why, "rejected": 5})
    assert rows == rows_of(*[(None, None, None, None, None, why)] * 9)
    assert bench.compare(WAVE, {"completed": 4}, {"error": why})[-1]["measured"] == 0.0


def test_a_zero_prediction_has_no_ratio_and_a_zero_time_an_infinite_rate() -> None:
    level = bench.Level("w", concurrency=2, prompts=2, isl=10, osl=11)  # 10 ITL steps, 22,000 token-ms
    pred = {
        "ttft_p50": {"ms": 0.0, "low_ms": 0.0, "high_ms": 1.0, "source": "a"},
        "ttft_p90": {"ms": 0.25, "low_ms": 0.0, "high_ms": 100.0, "source": "b"},
        "itl_p50": {"ms": 0.025, "low_ms": 0.0, "high_ms": 10.0, "source": "c"},
        "itl_p90": {"ms": 0.5, "low_ms": 0.25, "high_ms": 1.0, "source": "d"},
    }
    got = {"median_ttft_ms": 5.0, "median_itl_ms": 0.05, "p90_ttft_ms": math.nan, "output_throughput": "n/a"}
    rows = bench.compare(level, got, pred)
    assert rows == rows_of(
        (5.0, 0.0, 0.0, 1.0, None, "a"),
        (None, 0.25, 0.0, 100.0, None, "b"),
        (None, None, None, None, None, NO_P99),
        (0.05, 0.025, 0.0, 10.0, 2.0, "c"),
        (None, 0.5, 0.25, 1.0, None, "d"),
        (None, None, None, None, None, NO_P99),
        (None, 0.25, 0.0, 101.0, None, E2E),
        # 22,000 / (0.25 + 10 x 0.025) = 44,000; 22,000 / (100 + 100) = 110; a zero time: no finite rate
        (None, 44_000.0, 110.0, math.inf, None, TPUT),
        (None, 0.0, None, None, None, QUEUE),
    )


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (None, "ms", DASH),
        (999.994, "ms", "999.99 ms"),
        (1000.0, "ms", "1.00 s"),
        (1_000_000.0, "ms", "1,000.00 s"),
        (1234.56, "tok/s", "1,234.6 tok/s"),
        (1234.0, "calls", "1,234"),
        (999.5, "calls", "1,000"),
    ],
)
def test_amounts(value: float | None, unit: str, text: str) -> None:
    assert bench._amount(value, unit) == text


@pytest.mark.parametrize(
    ("low", "high", "unit", "text"),
    [
        (None, 5.0, "ms", ""),
        (5.0, None, "ms", ""),
        (1.0, 999.0, "ms", "1.00-999.00 ms"),
        (1.0, 1000.0, "ms", "0.00-1.00 s"),
        (1.0, 1000.5, "ms", "0.00-1.00 s"),
        (500_000.0, 1_000_000.0, "ms", "500.00-1,000.00 s"),
        (1.0, 999.0, "tok/s", "1.0-999.0 tok/s"),
        (1234.5, 5000.0, "calls", "1,234.5-5,000.0 calls"),
    ],
)
def test_bands(low: float | None, high: float | None, unit: str, text: str) -> None:
    assert bench._band(low, high, unit) == text


def test_the_table_right_aligns_the_numbers_and_trims_the_line_end() -> None:
    rows = [
        {"figure": "a", "unit": "calls", "measured": 1.0, "predicted": 22.0, "low": None, "high": None}
        | {"ratio": None, "source": ""},
        {"figure": "longer", "unit": "calls", "measured": 333.0, "predicted": 4.0, "low": 1.0, "high": 2.0}
        | {"ratio": 0.126, "source": "s"},
    ]
    assert bench.render_rows(rows) == [
        "figure  measured  predicted           band  ratio  source",
        "a              1         22" + " " * 21 + "—",
        "longer       333          4  1.0-2.0 calls   0.13  s",
    ]


# ---------------------------------------------------------------- the chart


def point(concurrency: int, *rows: tuple[str, Any, Any, Any, Any]) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "rows": [{"figure": f, "measured": m, "predicted": p, "low": lo, "high": hi} for f, m, p, lo, hi in rows],
    }


HEAD = [
    '<svg xmlns="http://www.w3.org/2000/svg" width="900" height="440" font-family="sans-serif" font-size="12">',
    '<rect width="900" height="440" fill="white"/>',
]
AXES = [
    '<line x1="80" y1="390" x2="600" y2="390" stroke="black"/>',
    '<line x1="80" y1="40" x2="80" y2="390" stroke="black"/>',
    '<text x="340.0" y="428" text-anchor="middle">calls at once (log scale)</text>',
    '<text x="16" y="215.0" transform="rotate(-90 16 215.0)" text-anchor="middle">ms (log scale)</text>',
]


def test_the_chart_of_three_levels() -> None:
    # x: 1, 2, 4 on a log scale from 80 to 600 px; y: 15 .. 666.67 ms widened by 1.5 to 10 .. 1,000 ms, 390 to 40 px
    points = [
        point(4, ("TTFT p50", None, 80.0, 60.0, 160.0), ("TTFT p90", 666.6666666666666, None, None, None)),
        point(
            1,
            ("TTFT p50", 30.0, 20.0, 15.0, 40.0),
            ("TTFT p90", 50.0, None, None, None),
            ("ITL p50", None, None, None, 30.0),
            ("errors", 5000.0, 0.001, None, None),
        ),
        point(2, ("TTFT p50", 60.0, 40.0, 30.0, 80.0), ("TTFT p90", 0.0, None, None, None), ("E2E p50", 2, 1, 1, 1)),
    ]
    blue, orange = "#1f77b4", "#ff7f0e"
    assert bench.bench_svg("lab & co: 4x300", points).split("\n") == [
        *HEAD,
        '<text x="80" y="22" font-size="14" font-weight="bold">lab &amp; co: 4x300</text>',
        *AXES,
        '<text x="80.0" y="406" text-anchor="middle">1</text>',
        '<text x="340.0" y="406" text-anchor="middle">2</text>',
        '<text x="600.0" y="406" text-anchor="middle">4</text>',
        '<line x1="80" y1="390.0" x2="600" y2="390.0" stroke="#eee"/>',
        '<text x="74" y="394.0" text-anchor="end">10</text>',
        '<line x1="80" y1="215.0" x2="600" y2="215.0" stroke="#eee"/>',
        '<text x="74" y="219.0" text-anchor="end">100</text>',
        '<line x1="80" y1="40.0" x2="600" y2="40.0" stroke="#eee"/>',
        '<text x="74" y="44.0" text-anchor="end">1000</text>',
        f'<polygon fill="{blue}" fill-opacity="0.12" stroke="none" '
        'points="80.0,284.6 340.0,232.0 600.0,179.3 600.0,253.8 340.0,306.5 80.0,359.2"/>',
        f'<polyline fill="none" stroke="{blue}" stroke-width="2" stroke-dasharray="6,4" '
        'points="80.0,337.3 340.0,284.6 600.0,232.0"/>',
        f'<polyline fill="none" stroke="{blue}" stroke-width="2.5" points="80.0,306.5 340.0,253.8"/>',
        f'<circle cx="80.0" cy="306.5" r="3.5" fill="{blue}"/>',
        f'<circle cx="340.0" cy="253.8" r="3.5" fill="{blue}"/>',
        f'<polyline fill="none" stroke="{orange}" stroke-width="2.5" points="80.0,267.7 600.0,70.8"/>',
        f'<circle cx="80.0" cy="267.7" r="3.5" fill="{orange}"/>',
        f'<circle cx="600.0" cy="70.8" r="3.5" fill="{orange}"/>',
        f'<polyline fill="none" stroke="{blue}" stroke-width="2.5" stroke-dasharray="6,4" '
        'points="612.0,50.0 640.0,50.0"/>',
        '<text x="646" y="54">TTFT p50 predicted (band shaded)</text>',
        f'<polyline fill="none" stroke="{blue}" stroke-width="2.5" points="612.0,70.0 640.0,70.0"/>',
        '<text x="646" y="74">TTFT p50 measured</text>',
        f'<polyline fill="none" stroke="{orange}" stroke-width="2.5" points="612.0,90.0 640.0,90.0"/>',
        '<text x="646" y="94">TTFT p90 measured</text>',
        "</svg>",
        "",
    ]


def test_the_chart_of_one_level_without_figures() -> None:
    # one level: x from half to twice it, so it sits in the middle; no figure: 1 .. 10 ms
    assert bench.bench_svg("t", [point(8, ("errors", 3.0, 1.0, None, None))]).split("\n") == [
        *HEAD,
        '<text x="80" y="22" font-size="14" font-weight="bold">t</text>',
        *AXES,
        '<text x="340.0" y="406" text-anchor="middle">8</text>',
        '<line x1="80" y1="390.0" x2="600" y2="390.0" stroke="#eee"/>',
        '<text x="74" y="394.0" text-anchor="end">1</text>',
        '<line x1="80" y1="40.0" x2="600" y2="40.0" stroke="#eee"/>',
        '<text x="74" y="44.0" text-anchor="end">10</text>',
        "</svg>",
        "",
    ]


def test_the_chart_plots_small_measurements_and_levels_of_equal_concurrency() -> None:
    points = [point(8, ("ITL p50", 0.5, None, None, None)), point(8, ("ITL p50", 0.75, None, None, None))]
    svg = bench.bench_svg("t", copy.deepcopy(points))
    assert svg.count("<circle") == 2 and svg.count('stroke="#2ca02c"') == 2
    assert '<text x="646" y="54">ITL p50 measured</text>' in svg
    # 0.5 .. 0.75 ms widened to 0.33 .. 1.125 ms: one grid line, at 1 ms
    assert svg.count('stroke="#eee"') == 1 and '<text x="74" y="77.9" text-anchor="end">1</text>' in svg


def test_two_levels_span_the_whole_axis() -> None:
    # two levels: the x axis runs from the first (at the left edge, x 80) to the second (at the right edge, x 600)
    none = ("errors", 0.0, 0.0, None, None)
    svg = bench.bench_svg("t", [point(4, none), point(16, none)])
    labels = [line for line in svg.split("\n") if line.endswith('text-anchor="middle">4</text>')
              or line.endswith('text-anchor="middle">16</text>')]  # fmt: skip
    assert labels == ['<text x="80.0" y="406" text-anchor="middle">4</text>',
                      '<text x="600.0" y="406" text-anchor="middle">16</text>']  # fmt: skip
