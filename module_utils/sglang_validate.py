"""Fleet validation before any host is touched: each problem names the variable, the value, the rule and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:
    from ansible.module_utils.sglang_capacity import CapacityError, is_dsv4, model_context_len, resolve_engine
    from ansible.module_utils.sglang_declared import GROUPS, declared_in, engine_envelope, router_envelope
    from ansible.module_utils.sglang_schema import ENGINE_ROLES, EnvelopeError
except ImportError:
    from .sglang_capacity import CapacityError, is_dsv4, model_context_len, resolve_engine
    from .sglang_declared import GROUPS, declared_in, engine_envelope, router_envelope
    from .sglang_schema import ENGINE_ROLES, EnvelopeError


def _msg(var: str, value: Any, rule: str, fix: str) -> str:
    return f"{var}={value!r}: {rule}; fix: {fix}"


def engine_limits(model_config: Mapping[str, Any], env: Mapping[str, Any], hostvars: Mapping[str, Any]) -> Any:
    """Capacity-model limits for a declared engine envelope on its host."""
    model = hostvars.get("sglang_model") or {}
    return resolve_engine(
        model_config,
        env,
        float(hostvars.get("sglang_gpu_memory_gib", 0)),
        params_b=model.get("params_b"),
        quantization=model.get("quantization"),
    )


def check_engine(
    host: str, role: str, env: Mapping[str, Any], hostvars: Mapping[str, Any], model_config: Mapping[str, Any]
) -> tuple[list[str], Any]:
    """Arithmetic checks of one engine envelope: (problems, the capacity-model limits or None)."""

    def var(key: str) -> str:
        return f"{host}: {declared_in(role, hostvars, key)}.{key}"

    errors: list[str] = []
    gpu_ids = [int(g) for g in env.get("gpu_ids") or []]
    tp = int(env.get("tp_size") or 1)
    if len(gpu_ids) != tp:
        errors.append(
            _msg(
                var("gpu_ids"),
                gpu_ids,
                f"tp_size={tp} needs exactly {tp} GPUs",
                f"list {tp} GPU ids or set tp_size to {len(gpu_ids)}",
            )
        )
    if gpu_ids and sorted(gpu_ids) != list(range(min(gpu_ids), min(gpu_ids) + len(gpu_ids))):
        errors.append(
            _msg(
                var("gpu_ids"),
                gpu_ids,
                "SGLang uses base_gpu_id..base_gpu_id+tp_size-1",
                "declare contiguous GPU ids",
            )
        )
    per_host = hostvars.get("sglang_gpus_per_host")
    if per_host is not None and any(g < 0 or g >= int(per_host) for g in gpu_ids):
        errors.append(
            _msg(
                var("gpu_ids"),
                gpu_ids,
                f"the host has GPUs 0..{int(per_host) - 1}",
                "use GPU ids that exist on the host",
            )
        )
    mfs = env.get("mem_fraction_static")
    if mfs is not None and not 0 < float(mfs) < 1:
        errors.append(_msg(var("mem_fraction_static"), mfs, "must be in (0, 1)", "use e.g. 0.83"))
    if env.get("max_queued_requests") is not None:
        errors.append(
            _msg(
                var("max_queued_requests"),
                env["max_queued_requests"],
                "SGLang ignores --max-queued-requests in PD mode",
                "remove it and bound the queue with sglang_router.queue_size",
            )
        )
    chunk, max_prefill = env.get("chunked_prefill_size"), env.get("max_prefill_tokens")
    if chunk is not None and max_prefill is not None and int(chunk) > 0 and int(chunk) > int(max_prefill):
        errors.append(
            _msg(
                var("chunked_prefill_size"),
                chunk,
                f"larger than max_prefill_tokens={max_prefill}, which caps every prefill batch",
                f"lower it to <= {max_prefill} or raise max_prefill_tokens",
            )
        )
    if is_dsv4(model_config):
        if env.get("page_size") not in (None, 256):
            errors.append(
                _msg(
                    var("page_size"),
                    env["page_size"],
                    "SGLang forces 256 for DeepSeek-V4",
                    "declare 256 or leave it unset",
                )
            )
        if env.get("kv_cache_dtype") not in (None, "auto", "fp8_e4m3", "bfloat16"):
            errors.append(
                _msg(
                    var("kv_cache_dtype"),
                    env["kv_cache_dtype"],
                    "DeepSeek-V4 allows only fp8_e4m3 or bfloat16",
                    "use fp8_e4m3",
                )
            )
    model_max = model_context_len(model_config)
    ctx = env.get("context_length")
    if ctx is not None and int(ctx) > model_max:
        errors.append(
            _msg(var("context_length"), ctx, f"above the model's maximum {model_max}", f"lower it to <= {model_max}")
        )
    cap = env.get("max_total_tokens")
    if cap is not None and ctx is not None and int(cap) < int(ctx):
        errors.append(
            _msg(
                var("max_total_tokens"),
                cap,
                f"below one full-length request (context_length={ctx})",
                f"raise it to >= {ctx} or lower context_length",
            )
        )
    if errors:
        return errors, None
    try:
        limits = engine_limits(model_config, env, hostvars)
    except CapacityError as exc:
        return [f"{host}: sglang_{role}: {exc}"], None
    if ctx is not None and int(ctx) > limits.max_total_num_tokens:
        errors.append(
            _msg(
                var("context_length"),
                ctx,
                f"above the KV pool this envelope gets ({limits.max_total_num_tokens} tokens)",
                "lower context_length or raise mem_fraction_static",
            )
        )
    return errors, limits


def _ports(role: str, env: Mapping[str, Any]) -> dict[str, Any]:
    names = ("port", "disaggregation_bootstrap_port", "prometheus_port")
    return {f"sglang_{role}.{n}": env[n] for n in names if env.get(n) is not None}


def check_fleet(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], model_config: Mapping[str, Any]
) -> list[str]:
    """Every problem in the inventory's envelope; an empty list means it may be deployed."""
    errors: list[str] = []
    decode_running = 0
    per_host_gpus: dict[str, dict[int, str]] = {}
    per_host_ports: dict[str, dict[int, str]] = {}
    for role in (*ENGINE_ROLES, "router"):
        for host in groups.get(GROUPS[role], []):
            hv = all_hostvars[host]
            try:
                env = router_envelope(hv) if role == "router" else engine_envelope(role, hv)
            except EnvelopeError as exc:
                errors.append(f"{host}: {exc}")
                continue
            for var, port in _ports(role, env).items():
                other = per_host_ports.setdefault(host, {}).get(int(port))
                if other:
                    errors.append(
                        _msg(
                            f"{host}: {var}",
                            port,
                            f"port already used by {other}",
                            "give each server on a host its own ports",
                        )
                    )
                per_host_ports[host][int(port)] = var
            if role == "router":
                continue
            for gpu in env.get("gpu_ids") or []:
                other = per_host_gpus.setdefault(host, {}).get(int(gpu))
                if other:
                    errors.append(
                        _msg(
                            f"{host}: sglang_{role}.gpu_ids",
                            env["gpu_ids"],
                            f"GPU {gpu} is already used by {other}",
                            "give each engine its own GPUs",
                        )
                    )
                per_host_gpus[host][int(gpu)] = f"sglang_{role}"
            engine_errors, limits = check_engine(host, role, env, hv, model_config)
            errors += engine_errors
            if role == "decode" and not engine_errors:
                decode_running += limits.max_running_requests
    for host in groups.get(GROUPS["router"], []):
        try:
            router = router_envelope(all_hostvars[host])
        except EnvelopeError:
            continue
        mcr = router.get("max_concurrent_requests")
        if mcr is not None and decode_running and int(mcr) > decode_running:
            errors.append(
                _msg(
                    f"{host}: sglang_router.max_concurrent_requests",
                    mcr,
                    f"above what the decode fleet runs at once ({decode_running})",
                    f"lower it to <= {decode_running}; extra requests belong in queue_size",
                )
            )
    return errors
