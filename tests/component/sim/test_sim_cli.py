"""The command line: SGLang 0.5.23's flag names, types, prefix rules and error texts."""

from __future__ import annotations

import argparse
import logging
import subprocess
import sys

import pytest
from sglang_sim import cli
from sglang_sim.flag_table import SGLANG_FLAGS

# A PD prefill command line as the serve script renders it (reference, section 6), plus the decode-only flags.
RENDERED = (
    "--model-path /models/DeepSeek-V4 --served-model-name deepseek-v4 --host 0.0.0.0 --port 30000 --tp-size 4 "
    "--base-gpu-id 0 --gpu-id-step 1 --trust-remote-code --context-length 131072 --max-total-tokens 1000000 "
    "--max-running-requests 64 --max-queued-requests 256 --chunked-prefill-size 8192 --max-prefill-tokens 16384 "
    "--mem-fraction-static 0.85 --page-size 64 --kv-cache-dtype fp8_e4m3 --disaggregation-mode prefill "
    "--disaggregation-transfer-backend mooncake --disaggregation-bootstrap-port 8998 "
    "--disaggregation-ib-device mlx5_0 --enable-metrics --enable-cache-report --watchdog-timeout 600 "
    "--api-key secret --log-level info --attention-backend dsv4 --cuda-graph-max-bs-decode 64 "
    "--cuda-graph-max-bs-prefill 16 --cuda-graph-bs-decode 1 2 4 8 --cuda-graph-bs-prefill 1 2 "
    "--swa-full-tokens-ratio 0.1 --disable-radix-cache --allow-auto-truncate --dp-size 1"
).split()


def parse_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        cli.parse_args(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("128k", 128_000),
        ("1Ki", 1024),
        ("1M", 1_000_000),
        ("25.6k", 25_600),
        ("2Mi", 2 * 2**20),
        ("4096", 4096),
        (" 1G ", 10**9),
        ("1Ti", 2**40),
    ],
)
def test_human_readable_int(text: str, value: int) -> None:
    assert cli.human_readable_int(text) == value


@pytest.mark.parametrize("text", ["1.5Ki", "12kb", "abc", "1K", ""])
def test_human_readable_int_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.human_readable_int(text)


def test_rendered_command_line_parses_with_sglang_types() -> None:
    args, unmodelled = cli.parse_args(RENDERED)
    assert unmodelled == {}
    assert args["context_length"] == 131072 and args["max_total_tokens"] == 1_000_000
    assert args["max_running_requests"] == 64 and args["max_queued_requests"] == 256
    assert args["mem_fraction_static"] == 0.85 and args["watchdog_timeout"] == 600.0
    assert args["cuda_graph_bs_decode"] == [1, 2, 4, 8] and args["cuda_graph_bs_prefill"] == [1, 2]
    assert args["disaggregation_mode"] == "prefill" and args["disaggregation_bootstrap_port"] == 8998
    assert args["enable_metrics"] is True and args["disable_radix_cache"] is True
    assert args["api_key"] == "secret" and args["tp_size"] == 4


def test_defaults_match_sglang() -> None:
    args, _ = cli.parse_args(["--model-path", "/m"])
    assert args["host"] == "127.0.0.1" and args["port"] == 30000
    assert args["max_prefill_tokens"] == 16384 and args["kv_cache_dtype"] == "auto"
    assert args["disaggregation_mode"] == "null" and args["disaggregation_bootstrap_port"] == 8998
    assert args["disaggregation_transfer_backend"] == "mooncake" and args["watchdog_timeout"] == 300
    assert args["context_length"] is None and args["max_running_requests"] is None


def test_serve_word_and_aliases() -> None:
    args, _ = cli.parse_args(["serve", "--model", "/m", "--tensor-parallel-size", "4", "--data-parallel-size", "2"])
    assert (args["model_path"], args["tp_size"], args["dp_size"]) == ("/m", 4, 2)
    args, _ = cli.parse_args(["--model-path", "/m", "--tp", "4", "--dp", "2", "--context-length", "128k"])
    assert (args["tp_size"], args["dp_size"], args["context_length"]) == (4, 2, 128_000)


def test_removed_cuda_graph_flags_are_ambiguous(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_error(["--model-path", "/m", "--cuda-graph-max-bs", "64"], capsys) == (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match "
        "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"
    )
    assert parse_error(["--model-path", "/m", "--cuda-graph-bs", "1", "2"], capsys) == (
        "sglang serve: error: ambiguous option: --cuda-graph-bs could match "
        "--cuda-graph-bs-decode, --cuda-graph-bs-prefill"
    )


def test_removed_nsa_flag_is_unrecognized(capsys: pytest.CaptureFixture[str]) -> None:
    err = parse_error(["--model-path", "/m", "--nsa-prefill-backend", "x"], capsys)
    assert err == "sglang serve: error: unrecognized arguments: --nsa-prefill-backend x"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--context-length", "1.5Ki"], "argument --context-length: Decimals are not allowed with IEC suffixes"),
        (["--context-length", "abc"], "argument --context-length: Invalid integer value: 'abc'."),
        (["--max-running-requests", "many"], "argument --max-running-requests: invalid int value: 'many'"),
        (["--kv-cache-dtype", "fp16"], "argument --kv-cache-dtype: invalid choice: 'fp16'"),
        (["--disaggregation-mode", "both"], "argument --disaggregation-mode: invalid choice: 'both'"),
        (["--mem-fraction-static", "x"], "argument --mem-fraction-static: invalid float value: 'x'"),
    ],
)
def test_bad_values_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in parse_error(["--model-path", "/m", *argv], capsys)


def test_model_path_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert "the following arguments are required: --model-path/--model" in parse_error(["--port", "1"], capsys)


def test_unmodelled_flags_are_accepted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    argv = [
        "--model-path",
        "/m",
        "--dsa-prefill-backend",
        "flashmla_sparse",
        "--schedule-conservativeness",
        "0.5",
        "--enable-dp-attention",
        "--disable-cuda-graph",
        "--no-enable-tf32-matmul",
    ]
    _, unmodelled = cli.parse_args(argv)
    assert unmodelled == {
        "dsa_prefill_backend": "flashmla_sparse",
        "schedule_conservativeness": 0.5,
        "enable_dp_attention": True,
        "disable_cuda_graph": True,
        "enable_tf32_matmul": False,
    }
    with caplog.at_level(logging.INFO, logger="sglang_sim"):
        cli.log_unmodelled(unmodelled)
    text = caplog.text
    assert "'--enable-dp-attention' is deprecated" in text and "'--disable-cuda-graph' is deprecated" in text
    assert "not modelled by the simulator: dsa_prefill_backend, enable_tf32_matmul, schedule_conservativeness" in text


def test_flag_table_covers_sglang_parser() -> None:
    """531 options in SGLang 0.5.23 (532 actions with --help); every modelled dest is in the table."""
    assert len(SGLANG_FLAGS) == 531
    dests = {row[3] for row in SGLANG_FLAGS}
    assert set(cli.MODELLED) <= dests


def test_process_exits_2_on_removed_flag(model_dir: object) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_sim", "serve", "--model-path", "/m", "--cuda-graph-max-bs", "64"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in proc.stderr
