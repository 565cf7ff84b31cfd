"""Startup resolution: DeepSeek-V4 overrides, limits from the capacity model, startup failures."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import resolve_engine
from sglang_sim import cli
from sglang_sim.config import EngineConfig, StartupError, resolve_config
from sglang_sim.server_args_defaults import SERVER_ARGS_DEFAULTS
from sglang_sim.settings import SimSettings


def resolve(model_dir: Path, *flags: str, env: dict[str, str] | None = None) -> EngineConfig:
    argv = ["--model-path", str(model_dir), "--tp-size", "4", *flags]
    modelled, unmodelled = cli.parse_args(argv)
    return resolve_config(modelled, unmodelled, argv, SimSettings.from_env(env or {}))


def test_dsv4_overrides(model_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="sglang_sim"):
        cfg = resolve(model_dir, "--page-size", "64")
    assert "Use dsv4 attention backend for DeepseekV4ForCausalLM, setting page_size to 256." in caplog.text
    assert cfg.args["page_size"] == 256 and cfg.limits.page_size == 256
    assert cfg.args["kv_cache_dtype"] == "fp8_e4m3"
    assert cfg.args["max_running_requests"] == 256
    assert cfg.args["attention_backend"] == "dsv4"
    assert cfg.args["context_length"] is None and cfg.args["max_total_tokens"] is None  # echoed as given
    assert cfg.limits.context_len == json.loads((model_dir / "config.json").read_text())["max_position_embeddings"]


def test_args_hold_every_server_args_field(model_dir: Path) -> None:
    cfg = resolve(model_dir, "--served-model-name", "dsv4", "--schedule-conservativeness", "0.5")
    assert set(SERVER_ARGS_DEFAULTS) <= set(cfg.args)
    assert len(SERVER_ARGS_DEFAULTS) == 546
    assert cfg.args["served_model_name"] == "dsv4" and cfg.args["tokenizer_path"] == str(model_dir)
    assert cfg.args["schedule_conservativeness"] == 0.5  # unmodelled flags are echoed too
    assert (
        cfg.launch_command == f"--model-path {model_dir} --tp-size 4 --served-model-name dsv4 "
        "--schedule-conservativeness 0.5"
    )


def test_limits_come_from_the_capacity_model(model_dir: Path) -> None:
    cfg = resolve(
        model_dir,
        "--context-length",
        "128k",
        "--max-running-requests",
        "64",
        "--disaggregation-mode",
        "decode",
        "--mem-fraction-static",
        "0.88",
    )
    envelope = {
        "context_length": 128000,
        "max_total_tokens": None,
        "max_running_requests": 64,
        "chunked_prefill_size": None,
        "max_prefill_tokens": 16384,
        "mem_fraction_static": 0.88,
        "page_size": None,
        "kv_cache_dtype": "auto",
        "tp_size": 4,
        "dp_size": 1,
        "disaggregation_mode": "decode",
        "swa_full_tokens_ratio": None,
        "disable_radix_cache": False,
        "bf16_index_k": False,
    }
    model = json.loads((model_dir / "config.json").read_text())
    expected = resolve_engine(model, envelope, 141.0)
    assert cfg.limits == expected
    assert cfg.limits.context_len == 128000 and cfg.limits.max_running_requests == 64


def test_gpu_memory_and_bf16_index_keys_change_capacity(model_dir: Path) -> None:
    base = resolve(model_dir).limits.max_total_num_tokens
    bf16 = resolve(model_dir, env={"SGLANG_DSV4_BF16_INDEX_K": "1"}).limits.max_total_num_tokens
    smaller = resolve(model_dir, env={"SGLANG_SIM_GPU_MEMORY_GIB": "80"}).limits.max_total_num_tokens
    assert bf16 < base and smaller < base
    capped = resolve(model_dir, "--max-total-tokens", "1M").limits.max_total_num_tokens
    assert capped <= 1_000_000


def test_weights_that_do_not_fit_stop_startup(model_dir: Path) -> None:
    with pytest.raises(StartupError, match="mem_fraction_static"):
        resolve(model_dir, "--tp-size", "1")
    with pytest.raises(StartupError, match="mem_fraction_static"):
        resolve(model_dir, env={"SGLANG_SIM_WEIGHTS_GIB_PER_GPU": "139"})


def test_context_length_above_the_model_needs_the_override_env(model_dir: Path) -> None:
    with pytest.raises(StartupError, match="SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"):
        resolve(model_dir, "--context-length", "2Mi")
    cfg = resolve(model_dir, "--context-length", "2Mi", env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})
    assert cfg.limits.context_len == 2 * 2**20


def test_missing_model_config(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"config\.json does not exist"):
        resolve(tmp_path)


def test_bad_env_value_is_an_error() -> None:
    with pytest.raises(ValueError, match="SGLANG_SIM_TOKENS_PER_SEC"):
        SimSettings.from_env({"SGLANG_SIM_TOKENS_PER_SEC": "fast"})


def test_process_exits_1_when_memory_is_short(model_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_sim", "--model-path", str(model_dir), "--tp-size", "1", "--port", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "Failed to start the engine:" in proc.stdout and "mem_fraction_static" in proc.stdout
