"""Fleet validation before any host is touched: each problem names the variable, the value, the rule and the fix."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    engine_envelope,
    model_config_path,
    router_envelope,
    router_mesh,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import ENGINE_ROLES, EnvelopeError

from .sglang_component_rules import COMPONENT_RULES
from .sglang_engine_rules import CAPACITY, ENGINE_RULES, EngineContext
from .sglang_fleet import Engine, answer
from .sglang_fleet_rules import FLEET_RULES, ServerContext, component_listeners
from .sglang_host_rules import HOST_RULES, MODEL_FACT_RULES, HostContext
from .sglang_pairs import fleet_pair_problems
from .sglang_router_rules import ROUTER_RULES, RouterContext
from .sglang_rules import findings, message, run
from .sglang_sidedoors import sidedoor_problems
from .sglang_stack_rules import STACK_RULES, Server, StackContext

COMPONENT_GROUPS = ("sglang_frontend", "sglang_monitoring")  # read by the port map and the stack rules


def model_fact_problems(host: str, hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> list[str]:
    """Declared model facts that contradict the model config, or that neither declares."""
    return run([r for r in HOST_RULES if r.id in MODEL_FACT_RULES], HostContext(host, hostvars, model_config))


def host_problems(host: str, hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> list[str]:
    """Checks of an engine host's own variables (HOST_RULES: sglang_model, sglang_gpu_memory_gib,
    sglang_gpus_per_host)."""
    return run(HOST_RULES, HostContext(host, hostvars, model_config))


def check_engine(
    host: str, role: str, env: Mapping[str, Any], hostvars: Mapping[str, Any], model_config: Mapping[str, Any]
) -> tuple[list[str], Any]:
    """Checks of one engine envelope (ENGINE_RULES): (problems, the capacity-model limits or None). The limits come
    only when every stage before the capacity model passed and the capacity model sized the engine."""
    ctx = EngineContext(host, role, env, hostvars, model_config)
    found = findings(ENGINE_RULES, ctx)
    sized = ctx.gib > 0 and all(row.stage == CAPACITY for row, _finding in found)
    return [message(row.id, f) for row, f in found], ctx.limits[0] if sized else None


def check_router(
    host: str,
    env: Mapping[str, Any],
    decode_running: int,
    context_len: int | None,
    others: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """Checks of one router envelope (ROUTER_RULES) against smg 1.13.0's rules, the decode fleet and the envelopes
    of the fleet's `others` routers (their positive max_concurrent_requests add to this one's)."""
    caps = [int(o["max_concurrent_requests"]) for o in others if (o.get("max_concurrent_requests") or 0) > 0]
    return run(ROUTER_RULES, RouterContext(host, env, decode_running, context_len, sum(caps), len(others)))


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
    servers: list[Server] = []
    for role in (*ENGINE_ROLES, "router"):
        for host in groups.get(GROUPS[role], []):
            hv = all_hostvars[host]
            try:
                env = router_envelope(hv) if role == "router" else engine_envelope(role, hv)
            except EnvelopeError as exc:
                errors.append(f"{host}: {exc}")
                continue
            mesh = router_mesh(all_hostvars, groups, host) if role == "router" else {}
            server = ServerContext(
                host, role, env, per_host_ports.setdefault(host, {}), per_host_gpus.setdefault(host, {}), hv,
                [("smg's mesh port (two routers or more)", mesh["mesh_port"])] if mesh else [],
            )  # fmt: skip
            errors += run(FLEET_RULES, server)
            per_host_ports[host].update((port, var) for var, port in server.ports)
            per_host_gpus[host].update((int(gpu), f"sglang_{role}") for gpu in server.gpus)
            servers.append(Server(host, role, env))
            if role == "router":
                routers[host] = env
                continue
            engine_errors, limits = check_engine(host, role, env, hv, model_config)
            errors += engine_errors
            if limits is not None:
                engines.append(Engine.from_limits(host, role, limits))
            elif env.get("context_length") is not None:
                unsized_contexts.append(int(env["context_length"]))
    component_hosts = {h for g in COMPONENT_GROUPS for h in groups.get(g, [])}
    for host in sorted({*per_host_ports, *component_hosts}):  # the other components' listeners, per host
        listeners = component_listeners(host, all_hostvars[host], groups)
        errors += run(
            FLEET_RULES, ServerContext(host, "components", {}, per_host_ports.get(host, {}), {}, extra=listeners)
        )
    memory = answer(engines, list(routers.values())).memory if engines else None
    decode_running = memory.decode_running if memory else 0
    context_len = min(([memory.per_call_context] if memory else []) + unsized_contexts, default=None)
    for host, env in routers.items():
        others = [e for h, e in routers.items() if h != host]
        errors += check_router(host, env, decode_running, context_len, others)
    stack = StackContext(all_hostvars, groups, servers, context_len, model_config)
    errors += run(STACK_RULES, stack)
    errors += run(COMPONENT_RULES, stack)  # the front, VRRP, monitoring and unit settings (sglang_component_rules)
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
