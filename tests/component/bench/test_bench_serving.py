"""`sglang-envelope bench` end to end without a lab: SGLang 0.5.23's own bench_serving, through the runner in the
parser venv, against a simulated prefill and decode engine behind the real smg 1.13.0 router on loopback, with the
lab inventory's API key. The model's prediction is printed beside each measurement; its agreement is checked on the
lab (where the simulator keeps the model's time), not here."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import xml.dom.minidom
from pathlib import Path

import httpx
import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import sample_sum
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from sglang_envelope_cli import bench
from sglang_envelope_cli.commands import main
from simtools import Launcher, metrics_url

REPO = Path(__file__).resolve().parents[3]
LAB_KEY = "lab-test-key-not-secret"  # inventories/lab/group_vars/all/lab.yml
KEYED = ["--context-length", "8192", "--api-key", LAB_KEY]  # the simulated engines' flags
SERVING = next(bench.PARSER_VENV.glob("lib/python*/site-packages/sglang/benchmark/serving.py"), None)


def test_every_flag_the_bench_passes_is_bench_servings_own() -> None:
    assert SERVING is not None, f"{bench.PARSER_VENV} has no SGLang; fix: make parser-venv"
    defined = set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', SERVING.read_text()))
    wave = bench.Level("1x300", 1, 1, 200, 100)
    used = {a for a in bench.bench_argv(wave, "http://127.0.0.1:1", "/tok", Path("/o")) if a.startswith("--")}
    assert used <= defined, sorted(used - defined)


def test_bench_against_simulators_and_smg(
    launcher: Launcher, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _router, url = launcher.pd_router(KEYED, ["--policy", "round_robin", "--api-key", LAB_KEY])
    out = tmp_path / "report"
    argv = ["bench", "--inventory", str(REPO / "inventories" / "lab"), "--url", url, "--want", "4x300"]
    rc = main([*argv, "--output-tokens", "100", "--concurrency", "4,1", "--out", str(out)])
    printed = capfd.readouterr().out
    table = printed[printed.index("bench of ") :]
    print(table)  # the measured figures beside the model's, with their ratios
    assert rc == 0, printed[-3000:]
    assert f"written: {out / 'bench.json'}" in printed and f"written: {out / 'bench.svg'}" in printed

    doc = json.loads((out / "bench.json").read_text())
    xml.dom.minidom.parse(str(out / "bench.svg"))
    assert [(lv["concurrency"], lv["prompts"], lv["isl"], lv["osl"]) for lv in doc["levels"]] == [
        (4, 4, 200, 100),
        (1, 1, 200, 100),
    ]
    assert doc["versions"]["sglang (bench_serving)"] == "0.5.23"
    for level in doc["levels"]:
        result = level["result"]
        assert result["completed"] == level["prompts"], result["errors"]
        # the generated tokenizer counts the simulator's output as the simulator does
        assert result["total_output_tokens_retokenized"] == result["total_output_tokens"] == level["prompts"] * 100
        assert result["total_input_tokens"] == level["prompts"] * 200
        for key in ("median_ttft_ms", "p90_ttft_ms", "median_itl_ms", "p90_itl_ms", "output_throughput"):
            assert result[key] > 0 and math.isfinite(result[key]), key
        predicted = level["predicted"]
        if "error" in predicted:
            assert predicted["error"] == perf.NOT_PREDICTED
        else:
            ttft = next(r for r in level["rows"] if r["figure"] == "TTFT p50")
            assert ttft["ratio"] == pytest.approx(result["median_ttft_ms"] / ttft["predicted"])


def test_bench_measures_calls_whose_first_token_outlasts_smg_s_keep_alive(
    launcher: Launcher, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """smg writes an SSE comment (`: ping`) every --sse-keepalive-secs while a first token is pending (here 1 s, its
    default 15 s); the runner skips comment lines as SSE clients do, so bench_serving measures those calls instead
    of failing on them (orjson.JSONDecodeError)."""
    slow = {"SGLANG_SIM_TTFT_MS": "3500"}
    _router, url = launcher.pd_router(
        KEYED, ["--policy", "round_robin", "--api-key", LAB_KEY, "--sse-keepalive-secs", "1"], slow
    )
    out = tmp_path / "report"
    argv = ["bench", "-i", str(REPO / "inventories" / "lab"), "--url", url, "--want", "2x300", "--output-tokens", "50"]
    rc = main([*argv, "--concurrency", "2", "--out", str(out), "--json"])
    printed = capfd.readouterr()
    assert rc == 0, printed.err[-3000:]
    (level,) = json.loads(printed.out)["bench"]["levels"]
    assert level["result"]["completed"] == 2, level["result"]["errors"]
    assert level["result"]["median_ttft_ms"] > 3000


def _admission(metrics: str) -> float:
    """Calls smg holds in its admission window (running and queued), from its metrics page."""
    return sample_sum(httpx.get(metrics, timeout=5).text, ("smg_admission_inflight", "smg_admission_queue_depth"))


START_WAIT_S = 300


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_terminated_bench_stops_its_load(launcher: Launcher, tmp_path: Path, signum: int, code: int) -> None:
    """SIGTERM (a `timeout`, a test's teardown) or SIGINT to `sglang-envelope bench` alone ends the load it sends,
    with the shell's code for the signal: the runner it started does not go on filling the router's admission window
    after the command is gone."""
    slow = {"SGLANG_SIM_TTFT_MS": "200", "SGLANG_SIM_TOKENS_PER_SEC": "10"}
    router, url = launcher.pd_router(KEYED, ["--policy", "round_robin", "--api-key", LAB_KEY], slow)
    metrics = metrics_url(router)
    argv = ["bench", "-i", str(REPO / "inventories" / "lab"), "--url", url, "--want", "40x300", "--no-time"]
    argv += ["--output-tokens", "200", "--concurrency", "4", "--prompts", "40", "--out", str(tmp_path / "report")]
    # SIGINT at its default, as a terminal's foreground job has it: a job that a shell started with `&` (make test's
    # passes) inherits SIGINT ignored, and Python then leaves it ignored. env execs, so the pid stays the command's.
    cli = ["env", "--default-signal=INT", sys.executable, "-m", "sglang_envelope_cli", *argv]
    with subprocess.Popen(cli, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        # The bench starts bench_serving and its tokenizer first: minutes on a loaded 2-core machine.
        deadline = time.monotonic() + START_WAIT_S
        while _admission(metrics) < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, (
            f"the bench ended before it was signalled: {proc.stderr.read()[-2000:] if proc.stderr else ''}"
        )
        assert _admission(metrics) >= 1, f"the bench sent no call within {START_WAIT_S} s"
        proc.send_signal(signum)
        rc = proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
    assert rc == code, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    deadline = time.monotonic() + 10
    while _admission(metrics) > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    held = _admission(metrics)
    time.sleep(2)  # a runner left behind would send its next call by now
    assert (held, _admission(metrics)) == (0, 0), "calls still reach the router after the bench was terminated"
