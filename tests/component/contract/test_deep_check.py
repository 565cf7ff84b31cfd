"""The deep check: SGLang 0.5.23's and smg 1.13.0's own startup checks on the rendered command lines.

A corpus of envelopes that SGLang's or smg's own checks refuse (found in their post-init and hook code: the
resolution pipeline and check_server_args under sglang/srt/arg_groups/, smg's Python argument handling and its
Rust config validator): each is rendered with the codec the roles use, then refused by the deep check with the
source's message and the declared variable named. All lines go through one parser-venv process and one smg
process. The project's own rules are not involved: these envelopes are checked by SGLang and smg only.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import parse_env_file, parse_script
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_deep import (
    FILES_DIR,
    Line,
    _installed,
    command_lines,
    deep_check,
    line_problems,
    run_checkers,
)
from deploytools import REPO, VAULT_KEY, envelope

PARSER_PYTHON = REPO / ".cache" / "sglang-parser-venv" / "bin" / "python"
SMG_PYTHON = REPO / ".venv" / "bin" / "python"
MODELS = REPO / "models"
HOST = "gpu-node-01"
GROUPS = {"sglang_prefill": [HOST], "sglang_decode": [HOST], "sglang_router": [HOST]}
_P, _D, _C, _R, _M = "sglang_prefill", "sglang_decode", "sglang_engine_common", "sglang_router", "sglang_model"
SG = "SGLang 0.5.23 refuses"
SM = "smg 1.13.0 refuses"


def production() -> dict[str, Any]:
    """The shared envelope as inventories/production declares it (templates resolved; no vault, so no API key)."""
    hostvars = copy.deepcopy(envelope())
    hostvars[_C]["host"] = "0.0.0.0"
    hostvars["sglang_advertise_host"] = "127.0.0.1"
    return hostvars


def _with(var: str, **changes: Any) -> dict[str, Any]:
    return {var: changes}


# (id, overrides merged into the variable's dict, fragments of the problem: the declared variable, the source's
# message). Every envelope renders; each is refused by SGLang's or smg's own code, not by the project's rules.
CORPUS: list[tuple[str, dict[str, Any], list[str]]] = [
    # SGLang: check_server_args (arg_groups/validation_hook.py).
    (
        "served-name-colon",
        _with(_M, served_name="deepseek:v4"),
        [f"{HOST}: sglang_model.served_name='deepseek:v4'", SG, "served_model_name cannot contain a colon"],
    ),
    (
        "served-name-colon-envelope",
        _with(_C, served_model_name="ds:v4"),
        [f"{_C}.served_model_name='ds:v4'", "cannot contain a colon"],
    ),
    (
        "chunk-not-page-multiple",
        _with(_P, chunked_prefill_size=8000),
        [f"{_P}.chunked_prefill_size=8000", "chunked_prefill_size must be divisible by page_size"],
    ),
    (
        "chunk-not-page-multiple-shared",
        _with(_C, chunked_prefill_size=300),
        [f"{_C}.chunked_prefill_size=300", "must be divisible by page_size"],
    ),
    # SGLang: values its resolution replaces (server_args resolution hooks); the engine would run another value.
    (
        "page-size-forced",
        _with(_C, page_size=64),
        [f"{_C}.page_size=64", "resolution of the rendered command line makes page_size 256"],
    ),
    (
        "attention-backend-overridden",
        _with(_C, attention_backend="flashinfer"),
        [f"{_C}.attention_backend='flashinfer'", "makes attention_backend 'dsv4'"],
    ),
    ("base-gpu-id-negative", _with(_P, base_gpu_id=-1), [f"{_P}.base_gpu_id=-1", "base_gpu_id must be non-negative"]),
    (
        "gpu-ids-negative",
        _with(_P, gpu_ids=[-1, 0, 1, 2]),
        [f"{_P}.gpu_ids=[-1, 0, 1, 2]", "base_gpu_id must be non-negative"],
    ),
    # SGLang: the DeepSeek-V4 model override (kv dtypes that are valid choices, refused for this model).
    (
        "kv-fp8-e5m2",
        _with(_C, kv_cache_dtype="fp8_e5m2"),
        [f"{_C}.kv_cache_dtype='fp8_e5m2'", "fp8_e5m2 is not supported for DeepseekV4ForCausalLM"],
    ),
    (
        "kv-mxfp8-decode",
        _with(_D, kv_cache_dtype="mxfp8"),
        [f"{_D}.kv_cache_dtype='mxfp8'", "mxfp8 is not supported for DeepseekV4ForCausalLM"],
    ),
    ("kv-nvfp4-prefill", _with(_P, kv_cache_dtype="nvfp4"), [f"{_P}.kv_cache_dtype='nvfp4'", "nvfp4 is not supported"]),
    (
        "kv-fp4-mx-block16",
        _with(_C, kv_cache_dtype="fp4_mx_block16"),
        [f"{_C}.kv_cache_dtype='fp4_mx_block16'", "is not supported for DeepseekV4ForCausalLM"],
    ),
    (
        "kv-bf16-spelling",
        _with(_C, kv_cache_dtype="bf16"),
        [f"{_C}.kv_cache_dtype='bf16'", "bf16 is not supported for DeepseekV4ForCausalLM"],
    ),
    # SGLang: the hybrid SWA memory hook.
    (
        "swa-ratio-above-one",
        _with(_C, swa_full_tokens_ratio=2.0),
        [f"{_C}.swa_full_tokens_ratio=2.0", "--swa-full-tokens-ratio should be in range (0, 1.0]"],
    ),
    ("swa-ratio-zero", _with(_P, swa_full_tokens_ratio=0.0), [f"{_P}.swa_full_tokens_ratio=0.0", "in range (0, 1.0]"]),
    (
        "swa-ratio-negative",
        _with(_D, swa_full_tokens_ratio=-0.1),
        [f"{_D}.swa_full_tokens_ratio=-0.1", "in range (0, 1.0]"],
    ),
    # SGLang: the model config (context length vs the checkpoint's).
    (
        "context-above-model",
        _with(_C, context_length=2097152),
        [f"{_C}.context_length=2097152", "greater than the derived context_length (1048576)"],
    ),
    (
        "context-above-model-decode",
        _with(_D, context_length=1500000),
        [f"{_D}.context_length=1500000", "derived context_length (1048576)"],
    ),
    (
        "other-model-shorter-context",
        _with(_M, name="deepseek-v3.2"),
        [f"{_C}.context_length=524288", "derived context_length (163840)"],
    ),
    # SGLang: the PD hook (a valid backend refused in prefill mode) and the IB device parser.
    (
        "prefill-fake-transfer",
        _with(_P, disaggregation_transfer_backend="fake"),
        [f"{_P}.disaggregation_transfer_backend='fake'", "Prefill server does not support 'fake'"],
    ),
    (
        "ib-device-list-empty",
        _with(_C, disaggregation_ib_device=","),
        [f"{_C}.disaggregation_ib_device=','", "No valid IB devices specified"],
    ),
    ("ib-device-map-empty", _with(_C, disaggregation_ib_device="{}"), [f"{_C}.disaggregation_ib_device='{{}}'", SG]),
    # SGLang: its parser (choices) and its logging setup.
    (
        "attention-backend-unknown",
        _with(_C, attention_backend="flashattn"),
        [f"{_C}.attention_backend='flashattn'", "invalid choice: 'flashattn'"],
    ),
    (
        "transfer-backend-unknown",
        _with(_C, disaggregation_transfer_backend="tcp"),
        [f"{_C}.disaggregation_transfer_backend='tcp'", "invalid choice: 'tcp'"],
    ),
    ("log-level-unknown", _with(_C, log_level="verbose"), [f"{_C}.log_level='verbose'", "VERBOSE"]),
    # smg: the Rust config validator, reached by starting smg on loopback.
    (
        "router-health-interval-zero",
        _with(_R, health_check_interval_secs=0),
        [f"{_R}.health_check_interval_secs=0", SM, "Must be >= 1"],
    ),
    (
        "router-queue-timeout-zero",
        _with(_R, queue_timeout_secs=0),
        [f"{_R}.queue_timeout_secs=0", "Must be > 0 when queue_size > 0"],
    ),
    (
        "router-request-timeout-zero",
        _with(_R, request_timeout_secs=0),
        [f"{_R}.request_timeout_secs=0", "'request_timeout_secs': 0 - Must be > 0"],
    ),
    (
        "router-worker-startup-zero",
        _with(_R, worker_startup_timeout_secs=0),
        [f"{_R}.worker_startup_timeout_secs=0", "Must be > 0"],
    ),
    ("router-payload-zero", _with(_R, max_payload_size=0), [f"{_R}.max_payload_size=0", "'max_payload_size': 0"]),
    ("router-host-name", _with(_R, host="localhost"), [f"{_R}.host='localhost'", "invalid bind host 'localhost'"]),
    (
        "router-metrics-host-name",
        _with(_R, prometheus_host="metrics.internal"),
        [f"{_R}.prometheus_host='metrics.internal'", "invalid bind host"],
    ),
    (
        "router-metrics-port-is-port",
        _with(_R, prometheus_port=8000),
        [f"{_R}.port=8000", f"{_R}.prometheus_port=8000", "--prometheus-port and --port are both 8000"],
    ),
    ("router-metrics-port-zero", _with(_R, prometheus_port=0), [f"{_R}.prometheus_port=0", "Port must be > 0"]),
    ("router-port-zero", _with(_R, port=0), [f"{_R}.port=0", "'port': 0 - Port must be > 0"]),
    # smg: the conversion into the Rust router (field types), and its parser.
    ("router-port-above-16-bits", _with(_R, port=70000), [f"{_R}.port=70000", "OverflowError"]),
    (
        "router-admission-wait-negative",
        _with(_R, pd_admission_wait_secs=-1),
        [f"{_R}.pd_admission_wait_secs=-1", "OverflowError"],
    ),
    ("router-queue-size-negative", _with(_R, queue_size=-1), [f"{_R}.queue_size=-1", "OverflowError"]),
    (
        "router-health-interval-negative",
        _with(_R, health_check_interval_secs=-5),
        [f"{_R}.health_check_interval_secs=-5", "OverflowError"],
    ),
    # SGLang's mooncake_tcp backend drops the IB devices (arg_groups/pd_disaggregation_hook.py): a real change.
    (
        "ib-device-dropped-by-mooncake-tcp",
        _with(_C, disaggregation_transfer_backend="mooncake_tcp", disaggregation_ib_device="mlx5_0"),
        [f"{_C}.disaggregation_ib_device='mlx5_0'", "is not what the prefill engine would run", "None"],
    ),
    (
        "router-policy-of-the-old-router",
        _with(_R, policy="bucket"),
        [f"{_R}.policy='bucket'", "smg launch: error: argument --policy: invalid choice: 'bucket'"],
    ),
]


# Declared values SGLang rewrites into an equivalent form (validate_ib_devices in arg_groups/validation_hook.py: a
# comma list stripped and deduplicated, a per-GPU JSON map written compactly): compared in that form, not refused.
KEPT: list[tuple[str, dict[str, Any]]] = [
    ("ib-devices-json-with-spaces", _with(_C, disaggregation_ib_device='{"0": "mlx5_0", "1": "mlx5_1"}')),
    ("ib-devices-json-padded", _with(_C, disaggregation_ib_device='{ "0" : "mlx5_0 , mlx5_1" }')),
    ("ib-devices-comma-list-with-spaces", _with(_C, disaggregation_ib_device="mlx5_0, mlx5_1")),
    ("ib-devices-repeated", _with(_C, disaggregation_ib_device="mlx5_0,mlx5_0")),
]


def hostvars_for(overrides: dict[str, Any]) -> dict[str, Any]:
    hostvars = production()
    for var, changes in overrides.items():
        hostvars[var] = {**hostvars[var], **changes}
    return hostvars


def _venvs() -> None:
    if not PARSER_PYTHON.exists():
        pytest.fail(f"{PARSER_PYTHON} is missing; fix: run `make parser-venv`")
    if not SMG_PYTHON.exists():
        pytest.fail(f"{SMG_PYTHON} is missing; fix: run `make venv`")


@pytest.fixture(scope="module")
def corpus() -> dict[str, list[str]]:
    """The problems of every corpus case (and of the unchanged envelope, 'control'), from one run of each checker
    over the distinct lines."""
    _venvs()
    cases = [("control", {}), *((c[0], c[1]) for c in CORPUS), *KEPT]
    lines: dict[str, list[Line]] = {}
    unique: dict[str, Line] = {}
    for name, overrides in cases:
        lines[name], skipped = command_lines({HOST: hostvars_for(overrides)}, GROUPS, MODELS)
        assert not skipped and len(lines[name]) == 3, (name, skipped)
        for line in lines[name]:
            unique.setdefault(json.dumps([line.tool, line.argv, line.environ]), line)
    keys = list(unique)
    results, stats = run_checkers(list(unique.values()), str(PARSER_PYTHON), str(SMG_PYTHON), cache_dir=None)
    assert stats["checked"] == len(keys) and stats["cached"] == 0
    by_key = dict(zip(keys, results, strict=True))
    return {
        name: [
            p
            for line in lines[name]
            for p in line_problems(line, by_key[json.dumps([line.tool, line.argv, line.environ])])
        ]
        for name, _ in cases
    }


def test_corpus_size() -> None:
    ids = [c[0] for c in CORPUS]
    assert len(set(ids)) == len(ids) and len(ids) >= 30


def test_the_unchanged_envelope_passes(corpus: dict[str, list[str]]) -> None:
    assert corpus["control"] == []


@pytest.mark.parametrize("case", [c[0] for c in KEPT])
def test_a_value_sglang_writes_in_an_equivalent_form_passes(corpus: dict[str, list[str]], case: str) -> None:
    assert corpus[case] == []


@pytest.mark.parametrize(("case", "fragments"), [(c[0], c[2]) for c in CORPUS], ids=[c[0] for c in CORPUS])
def test_refused_by_sglang_or_smg_with_the_declared_variable(
    corpus: dict[str, list[str]], case: str, fragments: list[str]
) -> None:
    problems = corpus[case]
    assert problems, "not refused"
    assert all("fix: change " in p or "fix: declare " in p for p in problems), problems
    assert any(all(f in p for f in fragments) for p in problems), f"{fragments} not all in one of: {problems}"


@pytest.mark.parametrize("rendered", ["production"], indirect=True)  # the inventory production() reproduces
def test_lines_are_the_rendered_scripts(rendered: tuple[str, Path]) -> None:
    """The deep check runs the argv the serve scripts exec (playbooks/render.yml), --model-path aside, with the
    environment of their environment files."""
    name, root = rendered
    assert name == "production"
    lines, _ = command_lines({HOST: {**production(), "sglang_api_key": VAULT_KEY}}, GROUPS, MODELS)  # its vault file's
    for line in lines:
        script = root / HOST / "opt/sglang/bin" / f"serve_dsv4_{line.role}.sh"
        argv = parse_script(script.read_text())
        flags = argv[next(i for i, t in enumerate(argv) if t.startswith("--")) :]
        expected = list(line.argv)
        if "--model-path" in expected:
            expected[expected.index("--model-path") + 1] = production()[_M]["path"]
            assert line.argv[line.argv.index("--model-path") + 1] == str(MODELS / "deepseek-v4-flash")
        assert flags == expected, script
        environ = parse_env_file((root / HOST / "etc/sglang" / f"dsv4-{line.role}.env").read_text())
        assert {k: environ[k] for k in line.environ} == line.environ


def test_skipped_with_a_warning_without_the_parser_venv(tmp_path: Path) -> None:
    settings = {"mode": "auto", "parser_python": str(tmp_path / "none" / "python"), "smg_python": str(SMG_PYTHON),
                "models_dir": str(MODELS), "model_name": "deepseek-v4-flash", "cache_dir": ""}  # fmt: skip
    result = deep_check({HOST: production()}, GROUPS, settings)
    assert any("skipped" in w and "make parser-venv" in w for w in result["warnings"]), result
    assert result["stats"]["checked"] == 1  # the router line still runs
    strict = deep_check({HOST: production()}, GROUPS, {**settings, "mode": "true"})
    assert any("cannot run" in p and "make parser-venv" in p for p in strict["problems"]), strict
    off = deep_check({HOST: production()}, GROUPS, {**settings, "mode": "false"})
    assert off["problems"] == [] and off["stats"]["checked"] == 0 and "off" in off["warnings"][0]


def test_results_are_cached_by_line(tmp_path: Path) -> None:
    """A second run of the same lines reads the cache; a changed line runs again (router lines only: fast)."""
    _venvs()
    settings = {"mode": "auto", "parser_python": "", "smg_python": str(SMG_PYTHON), "models_dir": str(MODELS),
                "model_name": "deepseek-v4-flash", "cache_dir": str(tmp_path / "cache")}  # fmt: skip
    first = deep_check({HOST: production()}, GROUPS, settings)
    again = deep_check({HOST: production()}, GROUPS, settings)
    changed = deep_check({HOST: hostvars_for(_with(_R, queue_size=0))}, GROUPS, settings)
    assert (first["stats"]["cached"], again["stats"]["cached"], changed["stats"]["cached"]) == (0, 1, 0)
    assert len(os.listdir(tmp_path / "cache")) == 2
    assert FILES_DIR.is_dir()
    # The key holds the installed versions, read from the venv (not from the interpreter its python links to).
    assert _installed(str(SMG_PYTHON), "smg") == ["smg-1.13.0.dist-info"]
    if PARSER_PYTHON.exists():
        assert _installed(str(PARSER_PYTHON), "sglang") == ["sglang-0.5.23.dist-info"]


def test_playbook_stops_before_anything_is_rendered(tmp_path: Path) -> None:
    """Through the validate role: an envelope only SGLang refuses stops playbooks/render.yml before any file
    is written, with SGLang's message and the declared variable (the project's own rules pass it)."""
    import shutil

    import yaml
    from deploytools import playbook

    inventory = tmp_path / "inventory"
    shutil.copytree(REPO / "inventories" / "production", inventory, symlinks=False)
    override = {_D: {**envelope()[_D], "kv_cache_dtype": "mxfp8"}}
    (inventory / "group_vars" / "all" / "zz-test-override.yml").write_text(yaml.safe_dump(override))
    out = tmp_path / "rendered"
    run = playbook("-i", str(inventory), "playbooks/render.yml", "-e", f"sglang_render_dir={out}", timeout=600)
    assert run.returncode != 0, run.output[-3000:]
    message = next(line for line in run.output.splitlines() if "no host was touched" in line)
    for fragment in (f"{HOST}: {_D}.kv_cache_dtype='mxfp8'", SG, "mxfp8 is not supported for DeepseekV4ForCausalLM"):
        assert fragment in message, message
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*"))
