"""Table-driven: bad declared envelopes are refused before any host is touched, with the declared variable, its
value and the rule named; unusual but valid envelopes pass, SGLang's and smg's own startup checks included.

Every case is a copy of inventories/production with one override file. Each is checked in this process the way
roles/sglang_validate checks it: the inventory is loaded with Ansible's own inventory and variable managers (so
group_vars precedence and templating are Ansible's), the variables of each host are type-checked by Ansible's
ArgumentSpecValidator against the `inventory` entry point of the role's argument_specs (what validate_argument_spec
runs), then the role's filters run and the problem list is assembled by sglang_envelope_problems, the filter the
role fails with. A few cases of each kind also run playbooks/render.yml end to end: the role refuses the bad ones
with the same problems before any host play, and renders the valid ones."""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.inventory.manager import InventoryManager
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible.vars.manager import VariableManager
from deploytools import REPO, VAULT_KEY, Run, envelope, playbook

BASE = envelope()
PRODUCTION = REPO / "inventories" / "production"
COLLECTION = REPO / "collections" / "ansible_collections" / "sglang" / "dsv4"
ROLE = COLLECTION / "roles" / "sglang_validate"
RENDER = REPO / "playbooks" / "render.yml"
H = "gpu-node-01: "
REFUSED = "The declared envelope has problems; no host was touched"


def _with(var: str, **changes: Any) -> dict[str, Any]:
    """The override of one top-level variable: its shared value with `changes` applied (None deletes a key)."""
    value = {**BASE[var], **changes}
    return {var: {k: v for k, v in value.items() if v is not None}}


def _both(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {**a, **b}


_R, _D, _P, _C = "sglang_router", "sglang_decode", "sglang_prefill", "sglang_engine_common"
_NO_MAX_BS = _with(_D, cuda_graph_max_bs_decode=None, cuda_graph_bs_decode=[1, 2, 96])
_MODEL = BASE["sglang_model"]

# (id, overrides, fragments the refusal must contain: the declared variable with its value, and the rule or fix)
BAD: list[tuple[str, dict[str, Any], list[str]]] = [
    # Router values (smg 1.13.0's choices and limits).
    (
        "router-policy-typo",
        _with(_R, policy="round_robbin"),
        [f"{H}{_R}.policy='round_robbin'", "did you mean round_robin"],
    ),
    (
        "router-policy-unknown",
        _with(_R, policy="least_loaded"),
        [f"{_R}.policy='least_loaded'", "smg 1.13.0's choices"],
    ),
    ("router-queue-size-negative", _with(_R, queue_size=-1), [f"{_R}.queue_size=-1", "must be >= 0"]),
    (
        "router-mcr-zero",
        _with(_R, max_concurrent_requests=0),
        [f"{_R}.max_concurrent_requests=0", "no admission bound"],
    ),
    ("router-mcr-minus-one", _with(_R, max_concurrent_requests=-1), [f"{_R}.max_concurrent_requests=-1", "derive"]),
    ("router-mcr-unset", _with(_R, max_concurrent_requests=None), [f"{_R}.max_concurrent_requests=None", "<= 64"]),
    (
        "router-mcr-above-decode",
        _with(_R, max_concurrent_requests=100000),
        [f"{_R}.max_concurrent_requests=100000", "(64)"],
    ),
    ("router-request-timeout-zero", _with(_R, request_timeout_secs=0), [f"{_R}.request_timeout_secs=0", "must be > 0"]),
    (
        "router-queue-timeout-zero",
        _with(_R, queue_timeout_secs=0),
        [f"{_R}.queue_timeout_secs=0", "queue_timeout_secs must be > 0"],
    ),
    (
        "router-payload-too-small",
        _with(_R, max_payload_size=1048576),
        [f"{_R}.max_payload_size=1048576", "one full-context request"],
    ),
    ("router-payload-zero", _with(_R, max_payload_size=0), [f"{_R}.max_payload_size=0", "raise it to >= 8454144"]),
    ("router-empty-dict", {_R: {}}, [f"{H}{_R}={{}}", "declares no router envelope"]),
    ("router-port-out-of-range", _with(_R, port=70000), [f"{_R}.port=70000", "from 1 to 65535"]),
    ("router-port-empty", _with(_R, port=None), [f"{_R}.port=None", "collides"]),
    ("router-port-not-int", _with(_R, port="eight thousand"), [f"{_R}.port='eight thousand' is not a valid int"]),
    ("router-prometheus-port-zero", _with(_R, prometheus_port=0), [f"{_R}.prometheus_port=0", "from 1 to 65535"]),
    (
        "router-prometheus-port-collides",
        _with(_R, prometheus_port=30000),
        [f"{_R}.prometheus_port=30000", "already used"],
    ),
    ("router-port-collides-decode", _with(_R, port=30001), ["port=30001", "already used"]),
    ("router-health-interval-zero", _with(_R, health_check_interval_secs=0), [f"{_R}.health_check_interval_secs=0"]),
    ("router-startup-timeout-zero", _with(_R, worker_startup_timeout_secs=0), [f"{_R}.worker_startup_timeout_secs=0"]),
    ("router-admission-wait-negative", _with(_R, pd_admission_wait_secs=-5), [f"{_R}.pd_admission_wait_secs=-5"]),
    (
        "router-key-typo",
        _with(_R, max_concurent_requests=64),
        [f"{_R}.max_concurent_requests", "did you mean max_concurrent_requests"],
    ),
    (
        "router-key-typo-timeout",
        _with(_R, request_timeout=60),
        [f"{_R}.request_timeout", "did you mean request_timeout_secs"],
    ),
    # Engine values with a fixed set of choices in SGLang's parser.
    (
        "transfer-backend-typo",
        _with(_C, disaggregation_transfer_backend="mooncak"),
        [f"{_C}.disaggregation_transfer_backend='mooncak'", "did you mean mooncake"],
    ),
    (
        "transfer-backend-unknown",
        _with(_P, disaggregation_transfer_backend="rdma"),
        [f"{_P}.disaggregation_transfer_backend='rdma'", "SGLang 0.5.23's choices"],
    ),
    (
        "kv-dtype-typo",
        _with(_C, kv_cache_dtype="fp8_e4m4"),
        [f"{_C}.kv_cache_dtype='fp8_e4m4'", "did you mean fp8_e4m3"],
    ),
    (
        "kv-dtype-not-dsv4",
        _with(_C, kv_cache_dtype="fp8_e5m2"),
        [f"{_C}.kv_cache_dtype='fp8_e5m2'", "DeepSeek-V4 allows only"],
    ),
    (
        "attention-backend-unknown",
        _with(_D, attention_backend="flashmla_sparse"),
        [f"{_D}.attention_backend='flashmla_sparse'", "choices for --attention-backend"],
    ),
    # Ports.
    ("prefill-port-out-of-range", _with(_P, port=70000), [f"{_P}.port=70000", "from 1 to 65535"]),
    ("prefill-port-zero", _with(_P, port=0), [f"{_P}.port=0", "from 1 to 65535"]),
    ("decode-port-empty", _with(_D, port=None), [f"{_D}.port=None", "fall back to its parser's default"]),
    ("engine-port-not-int", _with(_D, port="30001x"), [f"{_D}.port='30001x' is not a valid int"]),
    (
        "bootstrap-port-out-of-range",
        _with(_P, disaggregation_bootstrap_port=99999),
        [f"{_P}.disaggregation_bootstrap_port=99999"],
    ),
    ("bootstrap-port-collides", _with(_P, disaggregation_bootstrap_port=30001), ["30001", "already used"]),
    ("engine-ports-collide", _with(_D, port=30000), [f"{_D}.port=30000", "port already used by sglang_prefill.port"]),
    ("router-on-engine-port", _with(_R, port=30000), [f"{_R}.port=30000", "already used"]),
    # GPU arithmetic.
    ("base-gpu-id-contradicts", _with(_P, base_gpu_id=2), [f"{_P}.base_gpu_id=2", "start at 0"]),
    ("base-gpu-id-negative", _with(_D, base_gpu_id=-1), [f"{_D}.base_gpu_id=-1", "non-negative"]),
    ("dp-times-tp-not-declared", _with(_D, dp_size=2), [f"{_D}.gpu_ids=[4, 5, 6, 7]", "dp_size=2 needs 8 GPUs"]),
    ("tp-not-gpu-count", _with(_P, tp_size=2), [f"{_P}.gpu_ids=[0, 1, 2, 3]", "tp_size=2 needs exactly 2 GPUs"]),
    ("tp-not-dividing-heads", _with(_P, tp_size=3, gpu_ids=[0, 1, 2]), [f"{_P}.tp_size=3", "64 attention heads"]),
    ("tp-zero", _with(_C, tp_size=0), [f"{_C}.tp_size=0", "must be >= 1"]),
    ("gpu-sets-overlap", _with(_D, gpu_ids=[2, 3, 4, 5]), [f"{_D}.gpu_ids=[2, 3, 4, 5]", "GPU 2 is already used"]),
    ("gpu-ids-not-contiguous", _with(_P, gpu_ids=[0, 1, 2, 8]), [f"{_P}.gpu_ids=[0, 1, 2, 8]", "contiguous"]),
    ("gpu-ids-beyond-host", _with(_D, gpu_ids=[6, 7, 8, 9]), [f"{_D}.gpu_ids=[6, 7, 8, 9]", "the host has GPUs 0..7"]),
    (
        "gpu-ids-not-ints",
        _with(_P, gpu_ids=["a", "b", "c", "d"]),
        [f"{_P}.gpu_ids=['a', 'b', 'c', 'd'] is not a valid intlist"],
    ),
    ("gpu-ids-empty", _with(_P, gpu_ids=[]), [f"{_P}.gpu_ids=[]", "fix: list 4 GPU ids"]),
    ("gpus-per-host-zero", {"sglang_gpus_per_host": 0}, [f"{H}sglang_gpus_per_host=0", "must be >= 1"]),
    # cuda-graph batch sizes.
    (
        "cuda-graph-bs-empty",
        _with(_D, cuda_graph_bs_decode=[]),
        [f"{_D}.cuda_graph_bs_decode=[]", "bare --cuda-graph-bs-decode"],
    ),
    (
        "cuda-graph-bs-above-max-bs",
        _with(_D, cuda_graph_bs_decode=[1, 2, 128]),
        [f"{_D}.cuda_graph_bs_decode=[1, 2, 128]", "cuda_graph_max_bs_decode=64"],
    ),
    ("cuda-graph-bs-above-running", _NO_MAX_BS, [f"{_D}.cuda_graph_bs_decode=[1, 2, 96]", "max_running_requests=64"]),
    ("cuda-graph-bs-zero", _with(_D, cuda_graph_bs_decode=[0, 1, 2]), [f"{_D}.cuda_graph_bs_decode=[0, 1, 2]", ">= 1"]),
    (
        "cuda-graph-max-bs-above-running",
        _with(_D, cuda_graph_max_bs_decode=128),
        [f"{_D}.cuda_graph_max_bs_decode=128"],
    ),
    (
        "cuda-graph-bs-string",
        _with(_D, cuda_graph_bs_decode="1,2,4"),
        [f"{_D}.cuda_graph_bs_decode='1,2,4' is not a valid intlist"],
    ),
    ("cuda-graph-max-bs-prefill-zero", _with(_P, cuda_graph_max_bs_prefill=0), [f"{_P}.cuda_graph_max_bs_prefill=0"]),
    # Ratios and fractions.
    ("swa-ratio-negative", _with(_C, swa_full_tokens_ratio=-0.1), [f"{_C}.swa_full_tokens_ratio=-0.1", "(0, 1.0]"]),
    ("swa-ratio-above-one", _with(_D, swa_full_tokens_ratio=1.5), [f"{_D}.swa_full_tokens_ratio=1.5", "(0, 1.0]"]),
    ("fraction-above-one", _with(_D, mem_fraction_static=1.2), [f"{_D}.mem_fraction_static=1.2", "must be in (0, 1)"]),
    ("fraction-zero", _with(_P, mem_fraction_static=0.0), [f"{_P}.mem_fraction_static=0.0", "must be in (0, 1)"]),
    (
        "fraction-not-float",
        _with(_P, mem_fraction_static="high"),
        [f"{_P}.mem_fraction_static='high' is not a valid float"],
    ),
    # Engine limits.
    ("context-above-model-max", _with(_C, context_length=2097152), [f"{_C}.context_length=2097152", "model's maximum"]),
    ("context-bad-suffix", _with(_C, context_length="512kb"), [f"{_C}.context_length='512kb' is not a valid size"]),
    ("context-zero", _with(_C, context_length=0), [f"{_C}.context_length=0", "must be >= 1"]),
    ("context-negative", _with(_C, context_length=-1), [f"{_C}.context_length=-1", "must be >= 1"]),
    (
        "context-above-kv-pool",
        _with(_P, mem_fraction_static=0.29),
        [f"{_C}.context_length=524288", "above the KV pool"],
    ),
    ("max-total-tokens-below-one-request", _with(_D, max_total_tokens=100000), [f"{_D}.max_total_tokens=100000"]),
    ("max-running-zero", _with(_D, max_running_requests=0), [f"{_D}.max_running_requests=0", "must be >= 1"]),
    ("max-queued-in-pd", _with(_D, max_queued_requests=256), [f"{_D}.max_queued_requests=256", "queue_size"]),
    ("chunk-above-max-prefill", _with(_C, chunked_prefill_size=32768), [f"{_C}.chunked_prefill_size=32768", "16384"]),
    (
        "chunk-not-page-multiple",
        _with(_C, chunked_prefill_size=1000),
        [f"{_C}.chunked_prefill_size=1000", "divisible by page_size"],
    ),
    ("chunk-zero", _with(_C, chunked_prefill_size=0), [f"{_C}.chunked_prefill_size=0", "-1 to disable"]),
    ("page-size-not-256", _with(_C, page_size=64), [f"{_C}.page_size=64", "SGLang forces 256"]),
    ("max-prefill-zero", _with(_C, max_prefill_tokens=0), [f"{_C}.max_prefill_tokens=0", "must be >= 1"]),
    ("watchdog-zero", _with(_C, watchdog_timeout=0), [f"{_C}.watchdog_timeout=0", "must be > 0"]),
    (
        "served-name-colon",
        _with(_C, served_model_name="deepseek:v4"),
        [f"{_C}.served_model_name='deepseek:v4'", "colon"],
    ),
    ("bool-as-string", _with(_C, trust_remote_code="yes"), [f"{_C}.trust_remote_code='yes' is not a valid bool"]),
    # Model and host variables.
    ("gpu-memory-zero", {"sglang_gpu_memory_gib": 0}, [f"{H}sglang_gpu_memory_gib=0", "must be > 0"]),
    ("gpu-memory-in-mib", {"sglang_gpu_memory_gib": 144384}, [f"{H}sglang_gpu_memory_gib=144384", "not MiB"]),
    (
        "gpu-memory-not-float",
        {"sglang_gpu_memory_gib": "lots"},
        [f"{H}sglang_gpu_memory_gib='lots'", "fix: declare a float"],
    ),
    (
        "params-in-units",
        {"sglang_model": {**_MODEL, "params_b": 284000000000}},
        ["sglang_model.params_b=284000000000", "declare params_b: 284 (billions)"],
    ),
    ("params-negative", {"sglang_model": {**_MODEL, "params_b": -1}}, ["sglang_model.params_b=-1", "must be > 0"]),
    (
        "params-too-large-for-gpus",
        {"sglang_model": {**_MODEL, "params_b": 2840}},
        ["sglang_model.params_b=2840", "the weights alone"],
    ),
    (
        "quantization-unknown",
        {"sglang_model": {**_MODEL, "quantization": "mxfp5"}},
        ["sglang_model.quantization", "mxfp4"],
    ),
    # Keys.
    (
        "removed-cuda-graph-max-bs",
        _with(_D, cuda_graph_max_bs=64),
        [f"{_D}.cuda_graph_max_bs", "use cuda_graph_max_bs_decode"],
    ),
    (
        "removed-nsa-prefill-backend",
        _with(_P, nsa_prefill_backend="flashmla_sparse"),
        [f"{_P}.nsa_prefill_backend", "dsa_prefill_backend"],
    ),
    (
        "removed-enable-dp-attention",
        _with(_D, enable_dp_attention=True),
        [
            f"{_D}.enable_dp_attention is a flag SGLang 0.5.23 deprecated for --attn-dp-size, which the envelope "
            "does not declare (its engines run attention tensor-parallel over tp_size); fix: remove "
            f"{_D}.enable_dp_attention"
        ],
    ),
    ("key-typo-context", _with(_C, context_lenght=131072), [f"{_C}.context_lenght", "did you mean context_length"]),
    (
        "key-typo-running",
        _with(_D, max_runing_requests=64),
        [f"{_D}.max_runing_requests", "did you mean max_running_requests"],
    ),
]

_MIN_PAYLOAD = 524288 * 16 + 64 * 1024
# (id, overrides): unusual, but SGLang and smg run them as intended.
VALID: list[tuple[str, dict[str, Any]]] = [
    ("context-iec-string", _with(_C, context_length="512Ki")),
    ("context-si-string", _with(_C, context_length="256k")),
    ("kv-bfloat16", _with(_C, kv_cache_dtype="bfloat16", context_length=262144)),
    ("decode-tp2-dp2", _with(_D, tp_size=2, dp_size=2)),
    ("policy-cache-aware", _with(_R, policy="cache_aware")),
    ("queue-size-zero", _with(_R, queue_size=0)),
    ("router-bound-below-fleet", _with(_R, max_concurrent_requests=16)),
    ("payload-at-minimum", _with(_R, max_payload_size=_MIN_PAYLOAD)),
    ("swa-ratio-one", _with(_C, swa_full_tokens_ratio=1.0)),
    ("chunked-prefill-disabled", _with(_C, chunked_prefill_size=-1)),
    ("single-cuda-graph-size", _with(_D, cuda_graph_bs_decode=[64])),
    ("engines-swap-gpus", _both(_with(_P, gpu_ids=[4, 5, 6, 7]), _with(_D, gpu_ids=[0, 1, 2, 3]))),
    ("base-gpu-id-agrees", _with(_D, base_gpu_id=4)),
    # Ports below 1024 need a root service user.
    ("ports-at-the-edges", _both(_with(_R, port=65535, prometheus_port=1), {"sglang_defaults_user": "root"})),
    ("transfer-backend-nixl", _with(_C, disaggregation_transfer_backend="nixl")),
]


# The cases that also run playbooks/render.yml: a type error, a fleet rule, a router rule and a removed key, and
# valid envelopes with the deep check on.
END_TO_END_BAD = ("gpu-memory-not-float", "gpu-sets-overlap", "router-policy-typo", "removed-cuda-graph-max-bs")
END_TO_END_VALID = ("context-iec-string", "decode-tp2-dp2", "policy-cache-aware")
BAD_BY_ID = {case: (overrides, fragments) for case, overrides, fragments in BAD}


def _filters() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_filters", COLLECTION / "plugins" / "filter" / "sglang.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


F = _filters()


@cache
def _role_settings() -> dict[str, Any]:
    """The role's defaults as a play resolves them from the repository root (sglang_defaults_project_dir)."""
    loader = DataLoader()
    defaults = loader.load_from_file(str(ROLE / "defaults" / "main.yml"), trusted_as_template=True)
    known = {**defaults, "sglang_defaults_project_dir": str(REPO), "ansible_playbook_python": sys.executable}
    return dict(Templar(loader=loader, variables=known).template(defaults))


@cache
def _models_dir() -> str:
    """sglang_defaults_models_dir as a play from the repository root resolves it."""
    loader = DataLoader()
    defaults = loader.load_from_file(str(ROLE.parent / "sglang_defaults/defaults/main.yml"), trusted_as_template=True)
    known = {"sglang_defaults_project_dir": str(REPO)}
    return str(Templar(loader=loader, variables=known).template(defaults["sglang_defaults_models_dir"]))


@cache
def _inventory_spec() -> dict[str, Any]:
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return dict(specs["inventory"]["options"])


def _deep_settings(mode: str, model_name: Any) -> dict[str, Any]:
    """The settings the role hands the deep check."""
    settings = _role_settings()
    return {
        "mode": mode,
        "parser_python": settings["sglang_validate_parser_python"],
        "smg_python": settings["sglang_validate_smg_python"],
        "models_dir": _models_dir(),
        "model_name": model_name,
        "cache_dir": settings["sglang_validate_deep_check_cache_dir"],
        "files_dir": str(ROLE / "files"),
    }


def _inventory(case: str, overrides: dict[str, Any], root: Path) -> Path:
    """A copy of inventories/production (symlinks resolved) with the vault file an operator adds (its key in the
    clear) and `overrides` as its last group_vars/all file."""
    inventory = root / case / "inventory"
    shutil.copytree(PRODUCTION, inventory, symlinks=False)
    (inventory / "group_vars" / "all" / "vault.yml").write_text(yaml.safe_dump({"sglang_api_key": VAULT_KEY}))
    (inventory / "group_vars" / "all" / "zz-test-override.yml").write_text(yaml.safe_dump(overrides))
    return inventory


def _load(inventory: Path) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """(hostvars, groups) of an inventory as a play of playbooks/render.yml sees them: Ansible's inventory and
    variable managers (group_vars precedence), each host's variables templated."""
    loader = DataLoader()
    loader.set_basedir(str(RENDER.parent))  # the play's directory: a group_vars/ there would rank above the inventory's
    manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=manager)
    hostvars = {}
    for host in manager.get_hosts():
        found = variables.get_vars(host=host)
        hostvars[host.name] = Templar(loader=loader, variables=found).template(found)
    return hostvars, {name: [host.name for host in group.get_hosts()] for name, group in manager.groups.items()}


def _unique(items: Any) -> list[Any]:
    return list(dict.fromkeys(items))


def validate(inventory: Path, deep_check: str) -> list[str]:
    """The problems roles/sglang_validate/tasks/main.yml fails with on `inventory` ([]: it passes), found in this
    process: its tasks up to "Fail with every problem", step by step."""
    hostvars, groups = _load(inventory)
    settings = _role_settings()
    spec = _inventory_spec()
    engines = _unique(groups.get("sglang_prefill", []) + groups.get("sglang_decode", []))
    hosts = _unique(engines + groups.get("sglang_router", []))
    assert hosts, "the inventory has no engine or router host"
    # validate_argument_spec runs ArgumentSpecValidator on the variables the spec names, one result per host.
    results = [
        {
            "item": host,
            "argument_errors": ArgumentSpecValidator(spec)
            .validate(F.pick(hostvars[host], spec.keys()), validate_role_argument_spec=True)
            .error_messages,
        }
        for host in hosts
    ]
    type_errors = F.argument_errors(results, hostvars, spec)
    models = [] if type_errors else _unique(hostvars[host]["sglang_model"]["name"] for host in engines)
    model_config = None
    if len(models) == 1:
        path = Path(settings["sglang_validate_model_config"] or F.model_config(models[0], _models_dir()))
        model_config = json.loads(path.read_text()) if path.is_file() else None
    fleet_errors: list[str] = []
    deep: dict[str, Any] = {}
    if model_config is not None:
        fleet_errors = F.check_fleet(hostvars, groups, model_config)
        deep = F.deep_check(hostvars, groups, _deep_settings(deep_check, models[0]))
    return list(
        F.envelope_problems(
            type_errors,
            models,
            model_config is not None,
            _models_dir(),
            fleet_errors,
            deep.get("problems", []),
        )
    )


def test_table_sizes() -> None:
    ids = [c[0] for c in BAD] + [c[0] for c in VALID]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    assert len(BAD) >= 60 and len(VALID) >= 10
    assert set(END_TO_END_BAD) <= {c[0] for c in BAD} and set(END_TO_END_VALID) <= {c[0] for c in VALID}


@pytest.mark.parametrize(("case", "overrides", "fragments"), BAD, ids=[c[0] for c in BAD])
def test_bad_envelope_is_refused(case: str, overrides: dict[str, Any], fragments: list[str], tmp_path: Path) -> None:
    """The project's own rules (the deep check is off)."""
    problems = validate(_inventory(case, overrides, tmp_path), "false")
    message = "\n".join(problems)
    assert problems, "the envelope was not refused"
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} missing from the problems:\n{message}"
    assert "fix:" in message, message


def test_the_fix_of_a_deprecated_flag_passes(tmp_path: Path) -> None:
    """The fix the refusal of enable_dp_attention names, applied as written, gives an envelope the validation and
    SGLang's and smg's own checks (the deep check) pass."""
    overrides, _ = BAD_BY_ID["removed-enable-dp-attention"]
    problems = validate(_inventory("refused", overrides, tmp_path), "false")
    assert len(problems) == 1, problems
    fix = problems[0].split("; fix: ")[1]
    assert fix == f"remove {_D}.enable_dp_attention"
    variable, key = fix.removeprefix("remove ").split(".")
    fixed = {variable: {k: v for k, v in overrides[variable].items() if k != key}}
    assert validate(_inventory("fixed", fixed, tmp_path), "auto") == []


@pytest.fixture(scope="module")
def engine_lines_checked(tmp_path_factory: pytest.TempPathFactory) -> None:
    """SGLang's checks of the engine command lines of every valid case at once, in one parser-venv process: the
    deep check caches each result by its command line, so each case's own deep check then reads them from the
    cache instead of starting SGLang once per case."""
    root = tmp_path_factory.mktemp("engine-lines")
    hostvars: dict[str, Any] = {}
    groups: dict[str, list[str]] = {"sglang_prefill": [], "sglang_decode": []}
    for case, overrides in VALID:
        case_hostvars, case_groups = _load(_inventory(case, overrides, root))
        for group, members in groups.items():
            for host in case_groups.get(group, []):
                hostvars[f"{case}/{host}"] = case_hostvars[host]
                members.append(f"{case}/{host}")
    F.deep_check(hostvars, groups, _deep_settings("auto", BASE["sglang_model"]["name"]))


@pytest.mark.usefixtures("engine_lines_checked")
@pytest.mark.parametrize(("case", "overrides"), VALID, ids=[c[0] for c in VALID])
def test_unusual_valid_envelope_passes(case: str, overrides: dict[str, Any], tmp_path: Path) -> None:
    """The project's rules and SGLang's and smg's own startup checks (the deep check) pass it."""
    problems = validate(_inventory(case, overrides, tmp_path), "auto")
    assert problems == [], "\n".join(problems)


def _run(case: str, overrides: dict[str, Any], root: Path) -> tuple[Run, list[Path]]:
    """playbooks/render.yml on the case's inventory: the bad cases with the deep check off, the valid ones with it."""
    deep = "auto" if case in END_TO_END_VALID else "false"
    inventory = _inventory(case, overrides, root)
    out = root / case / "rendered"
    run = playbook(
        "-i", str(inventory), str(RENDER), "-e", f"sglang_render_dir={out}",
        "-e", f"sglang_validate_deep_check={deep}", timeout=600,
    )  # fmt: skip
    return run, sorted(p for p in out.rglob("*") if p.is_file()) if out.exists() else []


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Run, list[Path]]]]:
    """Every end-to-end case run once, in parallel (each run is an ansible-playbook process)."""
    root = tmp_path_factory.mktemp("envelopes")
    cases = [(c[0], c[1]) for c in BAD if c[0] in END_TO_END_BAD] + [c for c in VALID if c[0] in END_TO_END_VALID]
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = dict(zip([c[0] for c in cases], pool.map(lambda c: _run(c[0], c[1], root), cases), strict=True))
    yield results


def _refusal(run: Run) -> list[str]:
    """The problems the role failed with: the `msg` of the failed task's result (YAML), less its first line."""
    lines = run.output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fatal: [localhost]: FAILED! =>"))
    block = itertools.takewhile(str.strip, lines[start + 1 :])
    message = yaml.safe_load(textwrap.dedent("\n".join(block)))["msg"]
    assert message[0] == f"{REFUSED}:", message
    return list(message[1:])


@pytest.mark.parametrize("case", END_TO_END_BAD)
def test_the_role_refuses_with_the_same_problems_before_anything(
    runs: dict[str, tuple[Run, list[Path]]], case: str, tmp_path: Path
) -> None:
    run, files = runs[case]
    tail = run.output[-3000:]
    assert run.returncode != 0, tail
    assert REFUSED in run.output, f"not refused by the validation:\n{tail}"
    assert not files, f"files were rendered before the refusal: {files}"
    assert "gpu-node-01" not in run.recap(), f"a host play ran: {run.recap()}"
    refusal = _refusal(run)
    assert refusal == validate(_inventory(case, BAD_BY_ID[case][0], tmp_path), "false")
    for fragment in BAD_BY_ID[case][1]:
        assert any(fragment in problem for problem in refusal), f"{fragment!r} missing from the refusal:\n{refusal}"


@pytest.mark.parametrize("case", END_TO_END_VALID)
def test_the_role_passes_and_renders_unusual_valid_envelopes(
    runs: dict[str, tuple[Run, list[Path]]], case: str
) -> None:
    run, files = runs[case]
    assert run.returncode == 0, run.output[-3000:]
    assert any(p.name == "serve_dsv4_decode.sh" for p in files) and any(p.name == "serve_dsv4_router.sh" for p in files)
