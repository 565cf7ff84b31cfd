"""Fleet validation before any host is touched: each problem names the variable, the value, the rule and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sglang_argspec import SGLANG, choice_problem
from .sglang_capacity import CapacityError, is_dsv4, model_context_len, resolve_engine, weights_bytes_per_gpu
from .sglang_declared import GROUPS, declared_in, declared_var, engine_envelope, model_config_path, router_envelope
from .sglang_fleet import Engine, answer
from .sglang_pairs import fleet_pair_problems
from .sglang_schema import ENGINE_ROLES, EnvelopeError
from .sglang_sidedoors import sidedoor_problems

# Request body bytes per token, estimated high so one full-context request always fits the router's
# max_payload_size: token ids as JSON ints take at most 8 bytes (6 digits for a 129,280-entry vocabulary, a
# comma and a space); text JSON-escaped as \uXXXX takes 6 bytes a code point and a token rarely spans more
# than 2 non-ASCII code points (12 bytes). 16 bytes covers both, plus a fixed 64 KiB for the rest of the body
# (sampling parameters, chat roles and template fields).
PAYLOAD_BYTES_PER_TOKEN = 16
PAYLOAD_OVERHEAD_BYTES = 64 * 1024
PORT_RANGE = (1, 65535)
SMG_DEFAULT_QUEUE_SIZE = 100  # smg 1.13.0 --queue-size
# At least this many parameters in `params_b` means a count of parameters, not billions.
PARAMS_B_UNITS = 100_000


# arg_groups/serving_hook.py: the fp4 indexer needs an SM100, SM120 or gfx95 GPU.
FP4_INDEXER_REFUSAL = "--enable-deepseek-v4-fp4-indexer requires SM100, SM120, or gfx95 GPUs with FP4 indexer support."


def _msg(var: str, value: Any, rule: str, fix: str) -> str:
    return f"{var}={value!r}: {rule}; fix: {fix}"


def payload_bytes(tokens: int) -> int:
    """A conservative size of the request body that carries `tokens` tokens (see PAYLOAD_BYTES_PER_TOKEN)."""
    return int(tokens) * PAYLOAD_BYTES_PER_TOKEN + PAYLOAD_OVERHEAD_BYTES


def engine_limits(model_config: Mapping[str, Any], env: Mapping[str, Any], hostvars: Mapping[str, Any]) -> Any:
    """Capacity-model limits for a declared engine envelope on its host."""
    params_b, quantization = model_facts(hostvars, model_config)
    return resolve_engine(
        model_config,
        env,
        float(hostvars.get("sglang_gpu_memory_gib", 0)),
        params_b=params_b,
        quantization=quantization,
    )


def _range(var: str, value: Any, low: float | None, high: float | None, rule: str, fix: str) -> list[str]:
    """A problem when a declared number is outside [low, high] (None: open side)."""
    if value is None or ((low is None or value >= low) and (high is None or value <= high)):
        return []
    return [_msg(var, value, rule, fix)]


def _port(var: str, value: Any, required: bool, what: str) -> list[str]:
    if value is None:
        if not required:
            return []
        return [
            _msg(
                var,
                value,
                f"{what} has no port, so it would fall back to its parser's default "
                "(SGLang and smg both take 30000, which collides with another server)",
                "declare a port from 1 to 65535",
            )
        ]
    return _range(var, value, *PORT_RANGE, "a port must be from 1 to 65535", "declare a free port from 1 to 65535")


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, max(1, limit) + 1) if n % d == 0]


def model_facts(hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> tuple[Any, Any]:
    """(params_b, quantization): as declared in sglang_model, else as models/<name>/config.json states them
    (num_parameters_b, quantization)."""
    model = hostvars.get("sglang_model") or {}
    params_b, quantization = model.get("params_b"), model.get("quantization")
    return (
        params_b if params_b is not None else model_config.get("num_parameters_b"),
        quantization if quantization is not None else model_config.get("quantization"),
    )


def model_fact_problems(host: str, hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> list[str]:
    """Declared model facts that contradict the model config, or that neither declares."""
    model = hostvars.get("sglang_model") or {}
    where = f"models/{model.get('name')}/config.json"
    errors = []
    for key, field in (("params_b", "num_parameters_b"), ("quantization", "quantization")):
        declared, stated = model.get(key), model_config.get(field)
        if declared is None and stated is None:
            errors.append(
                _msg(
                    f"{host}: sglang_model.{key}",
                    None,
                    f"neither sglang_model nor {where} ({field}) states it, and the capacity model needs it",
                    f"add {field} to {where} (preferred) or declare sglang_model.{key}",
                )
            )
        elif declared is not None and stated is not None:
            same = (
                abs(float(declared) - float(stated)) <= 1e-9 * max(1.0, abs(float(stated)))
                if key == "params_b"
                else str(declared) == str(stated)
            )
            if not same:
                errors.append(
                    _msg(
                        f"{host}: sglang_model.{key}",
                        declared,
                        f"contradicts {where}, which states {field}={stated!r}",
                        f"remove sglang_model.{key} (it is then taken from {where}) or correct the one that is wrong",
                    )
                )
    return errors


def host_problems(host: str, hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> list[str]:
    """Checks of an engine host's own variables (sglang_model, sglang_gpu_memory_gib, sglang_gpus_per_host)."""
    errors: list[str] = []
    gib = hostvars.get("sglang_gpu_memory_gib")
    if gib is None or float(gib) <= 0:
        errors.append(
            _msg(f"{host}: sglang_gpu_memory_gib", gib, "must be > 0 (GiB of one GPU)", "declare e.g. 141 for an H200")
        )
    elif float(gib) > 1024:
        errors.append(
            _msg(
                f"{host}: sglang_gpu_memory_gib",
                gib,
                "is the memory of one GPU in GiB, and no GPU has more than 1024 GiB",
                "declare the GiB of one GPU (141 for an H200), not MiB or the host's total",
            )
        )
    per_host = hostvars.get("sglang_gpus_per_host")
    if per_host is not None and int(per_host) < 1:
        errors.append(_msg(f"{host}: sglang_gpus_per_host", per_host, "must be >= 1", "declare the host's GPU count"))
    model = hostvars.get("sglang_model") or {}
    params_b = model.get("params_b")
    if params_b is not None and float(params_b) >= PARAMS_B_UNITS:
        errors.append(
            _msg(
                f"{host}: sglang_model.params_b",
                params_b,
                "is counted in billions of parameters; this looks like a count of single parameters",
                f"declare params_b: {float(params_b) / 1e9:g} (billions)",
            )
        )
    elif params_b is not None and float(params_b) <= 0:
        errors.append(
            _msg(f"{host}: sglang_model.params_b", params_b, "must be > 0 (billions)", "declare e.g. 284 (billions)")
        )
    else:
        errors += model_fact_problems(host, hostvars, model_config)
    return errors


def check_engine(
    host: str, role: str, env: Mapping[str, Any], hostvars: Mapping[str, Any], model_config: Mapping[str, Any]
) -> tuple[list[str], Any]:
    """Checks of one engine envelope: (problems, the capacity-model limits or None)."""

    def var(key: str) -> str:
        return f"{host}: {declared_in(role, hostvars, key)}.{key}"

    errors: list[str] = []
    for name, value in env.items():
        problem = choice_problem(role, name, value) if isinstance(value, str) else None
        if problem:
            errors.append(f"{var(name)}={value!r}: {problem}")
    errors += _port(var("port"), env.get("port"), True, f"the {role} engine")
    errors += _port(var("disaggregation_bootstrap_port"), env.get("disaggregation_bootstrap_port"), False, "")
    positive = (
        "tp_size",
        "dp_size",
        "context_length",
        "max_total_tokens",
        "max_running_requests",
        "max_prefill_tokens",
        "page_size",
        "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs_prefill",
    )
    for name in positive:
        errors += _range(var(name), env.get(name), 1, None, "must be >= 1", f"declare a positive {name} or remove it")
    base = next(
        (
            d[k]
            for d in (hostvars.get(f"sglang_{role}") or {}, hostvars.get("sglang_engine_common") or {})
            for k in d
            if k == "base_gpu_id"
        ),
        None,
    )  # declared; otherwise the engine envelope derives it from gpu_ids, whose own checks name them
    errors += _range(var("base_gpu_id"), base, 0, None, "base_gpu_id must be non-negative (SGLang)", "remove it")
    if env.get("chunked_prefill_size") == 0 or (env.get("chunked_prefill_size") or 0) < -1:
        errors.append(
            _msg(
                var("chunked_prefill_size"),
                env["chunked_prefill_size"],
                "must be a positive chunk size, or -1 to disable chunked prefill",
                "declare e.g. 8192",
            )
        )
    wd = env.get("watchdog_timeout")
    errors += _range(var("watchdog_timeout"), wd, 1e-9, None, "must be > 0 seconds", "declare e.g. 600")
    served = env.get("served_model_name")
    if served and ":" in str(served):
        errors.append(
            _msg(
                f"{host}: {declared_var(role, hostvars, 'served_model_name')}",
                served,
                "served_model_name cannot contain a colon (':') character; SGLang reserves it for 'model:adapter'",
                f"declare {str(served).replace(':', '-')!r}",
            )
        )
    ratio = env.get("swa_full_tokens_ratio")
    if ratio is not None and not 0 < float(ratio) <= 1:
        errors.append(
            _msg(
                var("swa_full_tokens_ratio"),
                ratio,
                "--swa-full-tokens-ratio should be in range (0, 1.0] (SGLang)",
                "remove it (DeepSeek-V4 defaults to 0.1) or declare a ratio in (0, 1]",
            )
        )
    if errors:
        return errors, None

    gpu_ids = list(env.get("gpu_ids") or [])
    tp = int(env.get("tp_size") or 1)
    dp = int(env.get("dp_size") or 1)
    need = tp * dp
    heads = int(model_config.get("num_attention_heads") or 0)
    experts = int(model_config.get("n_routed_experts") or 0)
    per_host = hostvars.get("sglang_gpus_per_host")
    for count, what in ((heads, "attention heads"), (experts, "routed experts")):
        if count and count % tp:
            fits = [d for d in _divisors(count, int(per_host or 8)) if not experts or experts % d == 0]
            errors.append(
                _msg(
                    var("tp_size"),
                    tp,
                    f"must divide the model's {count} {what} (models/.../config.json)",
                    f"use a tp_size of {', '.join(map(str, fits))}",
                )
            )
    if len(gpu_ids) != need:
        rule = f"tp_size={tp} needs exactly {tp} GPUs" if dp == 1 else f"tp_size={tp} x dp_size={dp} needs {need} GPUs"
        fix = f"list {need} GPU ids"
        if gpu_ids and len(gpu_ids) % dp == 0 and (not heads or heads % (len(gpu_ids) // dp) == 0):
            fix += f" or set tp_size to {len(gpu_ids) // dp}"
        errors.append(_msg(var("gpu_ids"), gpu_ids, rule, fix))
    if gpu_ids and sorted(gpu_ids) != list(range(min(gpu_ids), min(gpu_ids) + len(gpu_ids))):
        errors.append(
            _msg(
                var("gpu_ids"),
                gpu_ids,
                "SGLang uses base_gpu_id..base_gpu_id+tp_size-1",
                "declare contiguous GPU ids",
            )
        )
    if base is not None and gpu_ids and int(base) != min(gpu_ids):
        errors.append(
            _msg(
                var("base_gpu_id"),
                base,
                f"SGLang starts at base_gpu_id, but gpu_ids={gpu_ids} start at {min(gpu_ids)}",
                "remove base_gpu_id (it is derived from gpu_ids) or make them agree",
            )
        )
    if per_host is not None and int(per_host) >= 1 and any(g < 0 or g >= int(per_host) for g in gpu_ids):
        errors.append(
            _msg(
                var("gpu_ids"),
                gpu_ids,
                f"the host has GPUs 0..{int(per_host) - 1}",
                "use GPU ids that exist on the host",
            )
        )
    elif per_host is None and any(g < 0 for g in gpu_ids):
        errors.append(_msg(var("gpu_ids"), gpu_ids, "GPU ids are >= 0", "use GPU ids that exist on the host"))
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
    page = int(env.get("page_size") or (256 if is_dsv4(model_config) else 1))
    if chunk is not None and int(chunk) > 0 and role != "decode" and int(chunk) % page:
        errors.append(
            _msg(
                var("chunked_prefill_size"),
                chunk,
                f"chunked_prefill_size must be divisible by page_size ({page}) (SGLang)",
                f"use a multiple of {page}, e.g. {max(page, int(chunk) // page * page)}",
            )
        )
    errors += _cuda_graph_problems(env, var)
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
        if env.get("enable_deepseek_v4_fp4_indexer"):
            errors.append(
                _msg(
                    var("enable_deepseek_v4_fp4_indexer"),
                    env["enable_deepseek_v4_fp4_indexer"],
                    f"SGLang 0.5.23 refuses it at startup on H200 (SM90): '{FP4_INDEXER_REFUSAL}'",
                    "remove it; bf16_index_k keeps long-context recall on H200",
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
    params_b, quantization = model_facts(hostvars, model_config)
    model = {"params_b": params_b, "quantization": quantization}
    gib = float(hostvars.get("sglang_gpu_memory_gib") or 0)
    if not errors and params_b and quantization and gib > 0:  # host_problems names a missing GPU memory
        try:
            weights = weights_bytes_per_gpu(float(params_b), str(quantization), tp)
        except CapacityError:
            weights = 0
        if mfs is not None and gib * 2**30 * float(mfs) <= weights < gib * 2**30 * 0.9:
            errors.append(
                _msg(
                    var("mem_fraction_static"),
                    mfs,
                    f"leaves {gib * float(mfs):.1f} GiB per GPU for weights and KV, and the weights alone take "
                    f"{weights / 2**30:.1f} GiB at tp_size={tp}",
                    f"raise it above {weights / (gib * 2**30):.2f} (the shared envelope uses 0.78 to 0.83)",
                )
            )
        elif weights >= gib * 2**30 * float(mfs or 0.9):
            errors.append(
                _msg(
                    f"{host}: sglang_model.params_b",
                    model["params_b"],
                    f"the weights alone take {weights / 2**30:.0f} GiB per GPU at tp_size={tp} "
                    f"({model['quantization']}), more than sglang_gpu_memory_gib={gib:g} x mem_fraction_static allows",
                    "check that params_b is in billions and quantization is right, or spread the model over more GPUs",
                )
            )
    if errors or gib <= 0:
        return errors, None
    try:
        limits = engine_limits(model_config, env, hostvars)
    except CapacityError as exc:
        return [f"{host}: the {role} engine's envelope (sglang_engine_common, sglang_{role}): {exc}"], None
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


def _cuda_graph_problems(env: Mapping[str, Any], var: Any) -> list[str]:
    errors: list[str] = []
    running = env.get("max_running_requests")
    max_bs_decode = env.get("cuda_graph_max_bs_decode")
    if max_bs_decode is not None and running is not None and int(max_bs_decode) > int(running):
        errors.append(
            _msg(
                var("cuda_graph_max_bs_decode"),
                max_bs_decode,
                f"above max_running_requests={running}: no decode batch is ever that large",
                f"lower it to <= {running}",
            )
        )
    for phase in ("decode", "prefill"):
        sizes = env.get(f"cuda_graph_bs_{phase}")
        if sizes is None:
            continue
        name = f"cuda_graph_bs_{phase}"
        nargs = SGLANG[name].nargs
        max_bs = env.get(f"cuda_graph_max_bs_{phase}")
        if not sizes:
            errors.append(
                _msg(
                    var(name),
                    sizes,
                    f"renders a bare --cuda-graph-bs-{phase}, which SGLang's parser refuses (nargs {nargs!r})",
                    "list at least one batch size or remove the key",
                )
            )
        elif min(sizes) < 1:
            errors.append(_msg(var(name), sizes, "batch sizes must be >= 1", "list positive batch sizes"))
        elif max_bs is not None and max(sizes) > int(max_bs):
            errors.append(
                _msg(
                    var(name),
                    sizes,
                    f"sizes above cuda_graph_max_bs_{phase}={max_bs} are never captured",
                    f"keep sizes <= {max_bs} or raise cuda_graph_max_bs_{phase}",
                )
            )
        elif phase == "decode" and running is not None and max(sizes) > int(running):
            errors.append(
                _msg(
                    var(name),
                    sizes,
                    f"sizes above max_running_requests={running} are never used by a decode batch",
                    f"keep sizes <= {running}",
                )
            )
    return errors


def check_router(host: str, env: Mapping[str, Any], decode_running: int, context_len: int | None) -> list[str]:
    """Checks of one router envelope against smg 1.13.0's rules and the decode fleet."""

    def var(key: str) -> str:
        return f"{host}: sglang_router.{key}"

    errors: list[str] = []
    if not env:
        return [
            _msg(
                f"{host}: sglang_router",
                env,
                "the router host declares no router envelope (port, policy, admission limits)",
                "declare sglang_router as in group_vars/all/envelope.yml",
            )
        ]
    for name, value in env.items():
        problem = choice_problem("router", name, value) if isinstance(value, str) else None
        if problem:
            errors.append(f"{var(name)}={value!r}: {problem}")
    errors += _port(var("port"), env.get("port"), True, "the router")
    errors += _port(var("prometheus_port"), env.get("prometheus_port"), False, "")
    mcr = env.get("max_concurrent_requests")
    if mcr is None or int(mcr) < 1:
        meaning = {None: "unset means -1, which means", -1: "-1 means", 0: "0 means no limit:"}.get(
            mcr, "a negative value means"
        )
        errors.append(
            _msg(
                var("max_concurrent_requests"),
                mcr,
                f"smg 1.13.0 reads it as no admission bound ({meaning} "
                "'derive 1024 per core' or 'off'), so the router admits more than the decode fleet runs",
                f"declare a positive bound <= {decode_running or 'the decode engines max_running_requests'}",
            )
        )
    elif decode_running and int(mcr) > decode_running:
        errors.append(
            _msg(
                var("max_concurrent_requests"),
                mcr,
                f"above what the decode fleet runs at once ({decode_running})",
                f"lower it to <= {decode_running}; extra requests belong in queue_size",
            )
        )
    errors += _range(
        var("queue_size"), env.get("queue_size"), 0, None, "must be >= 0 (0: refuse with 429 when full)", "e.g. 256"
    )
    # smg: "Must be > 0 when queue_size > 0" (queue_size defaults to 100); without a queue the timeout is unused.
    queued = env.get("queue_size", SMG_DEFAULT_QUEUE_SIZE)
    queued = SMG_DEFAULT_QUEUE_SIZE if queued is None else int(queued)
    errors += _range(
        var("queue_timeout_secs"),
        env.get("queue_timeout_secs"),
        1 if queued > 0 else 0,
        None,
        f"queue_timeout_secs must be > 0 when queue_size > 0 (smg; queue_size={queued})"
        if queued > 0
        else "must be >= 0 seconds",
        "declare e.g. 60",
    )
    for name, fix in (
        ("request_timeout_secs", "e.g. 1800"),
        ("health_check_interval_secs", "e.g. 60"),
        ("worker_startup_timeout_secs", "e.g. 1800"),
        ("shutdown_grace_period_secs", "e.g. 60"),
    ):
        errors += _range(var(name), env.get(name), 1, None, f"{name} must be > 0 seconds (smg)", f"declare {fix}")
    for name, least, fix in (
        ("retry_max_retries", 1, "e.g. 5 (1: no retry)"),
        ("retry_initial_backoff_ms", 0, "e.g. 100"),
        ("retry_max_backoff_ms", 0, "e.g. 2000"),
    ):
        errors += _range(var(name), env.get(name), least, None, f"{name} must be >= {least} (smg)", f"declare {fix}")
    errors += _range(
        var("pd_admission_wait_secs"), env.get("pd_admission_wait_secs"), 0, None, "must be >= 0 seconds", "e.g. 30"
    )
    size = env.get("max_payload_size")
    if size is not None and context_len:
        need = payload_bytes(context_len)
        if int(size) < need:
            errors.append(
                _msg(
                    var("max_payload_size"),
                    size,
                    f"smaller than one full-context request ({context_len} tokens need up to {need} bytes at "
                    f"{PAYLOAD_BYTES_PER_TOKEN} bytes a token + {PAYLOAD_OVERHEAD_BYTES} bytes), so smg answers "
                    "413 'Request body exceeded the payload limit (max_payload_size)'",
                    f"raise it to >= {need} (the shared envelope uses 536870912)",
                )
            )
    return errors


def _ports(role: str, env: Mapping[str, Any]) -> dict[str, Any]:
    names = ("port", "disaggregation_bootstrap_port", "prometheus_port")
    return {f"sglang_{role}.{n}": env[n] for n in names if env.get(n) is not None}


def check_fleet(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]], model_config: Mapping[str, Any]
) -> list[str]:
    """Every problem in the inventory's envelope; an empty list means it may be deployed."""
    errors: list[str] = []
    engines: list[Engine] = []  # the engines the capacity model sized, for the fleet answer
    unsized_contexts: list[int] = []  # declared context_length of engines it could not size
    per_host_gpus: dict[str, dict[int, str]] = {}
    per_host_ports: dict[str, dict[int, str]] = {}
    engine_hosts = {h for role in ENGINE_ROLES for h in groups.get(GROUPS[role], [])}
    for host in sorted(engine_hosts):
        errors += host_problems(host, all_hostvars[host], model_config)
    routers: dict[str, dict[str, Any]] = {}
    for role in (*ENGINE_ROLES, "router"):
        for host in groups.get(GROUPS[role], []):
            hv = all_hostvars[host]
            try:
                env = router_envelope(hv) if role == "router" else engine_envelope(role, hv)
            except EnvelopeError as exc:
                errors.append(f"{host}: {exc}")
                continue
            for var, port in _ports(role, env).items():
                if not isinstance(port, int) or not PORT_RANGE[0] <= port <= PORT_RANGE[1]:
                    continue
                other = per_host_ports.setdefault(host, {}).get(port)
                if other:
                    errors.append(
                        _msg(
                            f"{host}: {var}",
                            port,
                            f"port already used by {other}",
                            "give each server on a host its own ports",
                        )
                    )
                per_host_ports[host][port] = var
            if role == "router":
                routers[host] = env
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
            if limits is not None:
                engines.append(Engine.from_limits(host, role, limits))
            elif env.get("context_length") is not None:
                unsized_contexts.append(int(env["context_length"]))
    memory = answer(engines, list(routers.values())).memory if engines else None
    decode_running = memory.decode_running if memory else 0
    context_len = min(([memory.per_call_context] if memory else []) + unsized_contexts, default=None)
    for host, env in routers.items():
        errors += check_router(host, env, decode_running, context_len)
    errors += fleet_pair_problems(all_hostvars, groups, model_config)
    errors += sidedoor_problems(all_hostvars, groups)  # extra env and args, ports, addresses (sglang_sidedoors)
    return errors


def envelope_problems(
    type_errors: list[str],
    models: list[Any],
    model_config_found: bool,
    models_dir: Any,
    fleet_errors: list[str],
    deep_problems: list[str],
) -> list[str]:
    """Every problem of the declared envelope, in the order the validation reports them: the types of the inventory
    variables (the `inventory` entry point of sglang_validate's argument_specs), the model of the engine hosts
    (`models`: their distinct sglang_model.name; one, with its config.json on the controller), the fleet rules
    (check_fleet) and SGLang's and smg's own checks (the deep check). The model is judged only when the types
    passed; [] means the envelope may be deployed."""
    problems = list(type_errors)
    if not type_errors and len(models) != 1:
        problems.append(
            f"sglang_model.name={','.join(str(m) for m in models)}: the engine hosts declare {len(models)} models, "
            "one fleet serves one; fix: declare one sglang_model for every engine host"
        )
    if not type_errors and not model_config_found and len(models) == 1:
        problems.append(
            f"sglang_model.name={models[0]}: no model config at {model_config_path(models_dir, models[0])}; "
            "fix: add the model config.json there or set sglang_validate_model_config"
        )
    return problems + list(fleet_errors) + list(deep_problems)
