"""Jinja filters over the envelope core (plugins/module_utils/, plugins/plugin_utils/): thin wrappers, no envelope logic
of their own."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

# The core modules are imported inside each filter: a run loads this file once in its main process (the preload
# callback, plugins/callback/preload.py), but a process without that callback loads it anew for every task that
# names one of its filters, and importing all of the core costs about 0.1 s there.

# Stands in for the secret in envelopes handed to the codec: the codec renders only a reference to the
# environment variable, so the key itself never enters an envelope, a script or a fact.
_SECRET_SET = "<set>"


def _plain(value: Any) -> Any:
    """Ansible's lazy containers as plain dicts and lists (the codec and the facts need plain data)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _with_secret(envelope: dict[str, Any], api_key: Any) -> dict[str, Any]:
    if api_key:
        envelope["api_key"] = _SECRET_SET
    return envelope


def engine_envelope(hostvars: Mapping[str, Any], role: str, api_key: Any = None) -> dict[str, Any]:
    """Declared envelope of the `role` engine on a host (`hostvars[host]`); api_key only marks the key as set."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return _with_secret(_plain(_declared.engine_envelope(role, hostvars)), api_key)


def router_envelope(hostvars: Mapping[str, Any], api_key: Any = None) -> dict[str, Any]:
    """Declared router envelope of a host; api_key only marks the key as set."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return _with_secret(_plain(_declared.router_envelope(hostvars)), api_key)


def render_args(envelope: Mapping[str, Any], role: str) -> list[str]:
    """One `--flag value` group per serve-script line (codec render_args)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_flags as _flags

    return list(_flags.render_args(role, _plain(envelope)))


def environ(envelope: Mapping[str, Any], role: str) -> dict[str, str]:
    """Environment variables the envelope sets (codec to_environ)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_flags as _flags

    return dict(_flags.to_environ(role, _plain(envelope)))


def public_envelope(envelope: Mapping[str, Any], role: str) -> dict[str, Any]:
    """The envelope without secret keys (for facts and logs)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_schema as _schema

    secret = {k.name for k in _schema.keys_for(role) if k.secret}
    return {k: v for k, v in _plain(envelope).items() if k not in secret}


def workers(hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """Prefill (url, bootstrap port) and decode urls of every engine in the inventory."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    names = {g: list(groups.get(g, [])) for g in _declared.GROUPS.values()}
    hosts = {h for members in names.values() for h in members}
    return _plain(_declared.workers({h: hostvars[h] for h in hosts}, names))


def advertised(host: str, hostvars: Mapping[str, Any]) -> str:
    """The address other hosts reach `host` at (sglang_declared.advertised)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return _declared.advertised(host, hostvars[host])


def routers(hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every router: host, local_url, and the address and port the front reaches it at (sglang_declared.routers)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    names = {_declared.GROUPS["router"]: list(groups.get(_declared.GROUPS["router"], []))}
    return _plain(_declared.routers({h: hostvars[h] for h in names[_declared.GROUPS["router"]]}, names))


def router_mesh(hostvars: Mapping[str, Any], groups: Mapping[str, Any], host: str) -> dict[str, Any]:
    """The smg mesh keys of router `host` ({} for a single router, or without sglang_router_mesh true;
    sglang_declared.router_mesh)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    names = {_declared.GROUPS["router"]: list(groups.get(_declared.GROUPS["router"], []))}
    return _plain(_declared.router_mesh({h: hostvars[h] for h in names[_declared.GROUPS["router"]]}, names, host))


def local_url(listen: Any, port: Any) -> str:
    """The URL a process on the same host reaches a server bound to `listen` and `port` at (module_utils)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return str(_declared.local_url(listen, port))


def model_inputs(hostvars: Mapping[str, Any], model_config: Any) -> dict[str, Any] | None:
    """The capacity model's inputs of an engine host, from its variables and the model's config.json text or dict;
    None without a config (the judge then compares no unset key)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    config = json.loads(model_config) if isinstance(model_config, str) and model_config else model_config
    return _plain(_declared.model_inputs(_plain(hostvars), _plain(config))) if config else None


def model_config(name: Any, models_dir: Any) -> str:
    """The controller's config.json of the model `name` under `models_dir` (module_utils model_config_path)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return _declared.model_config_path(models_dir, name)


def files_to_write(wanted: Mapping[str, Any], files: Mapping[str, Any]) -> list[str]:
    """The server files whose content, owner, group or mode on the host differ from what the deploy writes."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_hostfs as _hostfs

    return list(_hostfs.files_to_write(_plain(files), _plain(wanted)))


def paths_to_write(wanted: Sequence[Mapping[str, Any]], found: Mapping[str, Any]) -> list[str]:
    """The `dest` of each wanted file ({dest, content or src, owner, group, mode}) whose content, owner, group or
    mode on the host (sglang_host_info's files) differs; `src` is a controller file, read here."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_hostfs as _hostfs

    want = {}
    for item in wanted:
        data = Path(item["src"]).read_bytes() if "src" in item else str(item["content"]).encode()
        want[item["dest"]] = {"path": item["dest"], "sha1": hashlib.sha1(data).hexdigest()} | {
            key: item[key] for key in ("owner", "group", "mode")
        }
    have = {path: {"path": path, **entry} for path, entry in _plain(found).items()}
    return list(_hostfs.files_to_write(have, want))


def entry_differs(found: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> bool:
    """Whether a read entry (sglang_host_info's file, user or group) differs from `wanted` in any key it names."""
    found = found or {}
    return any(str(found.get(key)) != str(value) for key, value in wanted.items())


def entries_differing(found: Mapping[str, Any] | None, wanted: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The keys of `wanted` (paths, user or group names) whose read entry in `found` differs from the one wanted
    (sglang_entry_differs for each); a key `found` lacks differs."""
    found = found or {}
    return [key for key, entry in wanted.items() if entry_differs(found.get(key), entry)]


def preflight_stamps(servers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What sglang_host_info (option preflight_stamps) compares on the host to tell which of `servers`, as
    sglang_preflight takes them, passed before with these very inputs (module_utils sglang_preflight.stamp_of)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_preflight as _preflight

    return [_preflight.stamp_of(server) for server in _preflight.servers_as_checked(_plain(servers))]


def healthy(answer: Mapping[str, Any] | None, workers: Any = None) -> bool:
    """Whether a health answer ({status, json}: ansible.builtin.uri's result or sglang_layers_info's health) passes
    the gate: 200 and, where `workers` is set (the router's /readiness), that many healthy workers."""
    answer = answer or {}
    if answer.get("status") != 200:
        return False
    return workers is None or (answer.get("json") or {}).get("healthy_workers") == int(workers)


def gate_message(verdict_id: str, observations: Sequence[str]) -> str:
    """The health gate's message for a verdict of sglang_gate.VERDICTS and what was observed."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_gate

    return sglang_gate.message(verdict_id, observations)


def gate_probe_text(answer: Mapping[str, Any] | None, workers: Any = None) -> str:
    """What a health probe last answered (sglang_gate.probe_text)."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_gate

    return sglang_gate.probe_text(answer, workers)


def gate_settled(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    reprobe: Mapping[str, Any] | None,
    workers: Any = None,
    settle: Any = 0,
) -> str:
    """The gate's verdict after the settle time ("" when the server stayed up), sglang_gate.settled."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_gate

    return sglang_gate.settled(before, after, reprobe, healthy(reprobe, workers), workers, settle)


def predicted_times(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, Any],
    model_config: Mapping[str, Any],
    measured: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The audit's predicted TTFT / ITL of the declared fleet and, given the measured latency (measured_latency), the
    prediction at the measured load, at the simulator's speed factor where the engines are the simulator:
    plugin_utils.sglang_perf_fleet.audit_predictions ({predicted, at_load})."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import measured_load
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as _perf

    declared = declared_fleet(hostvars, groups)
    names = declared["groups"]
    engine_vars = ("sglang_engine_command", "sglang_engine_extra_env")
    factor = _perf.sim_speed_factor({h: pick(hostvars[h], engine_vars) for h in declared["hostvars"]}, names)
    load = measured_load(_plain(measured)) if measured else None
    return _perf.audit_predictions(declared["hostvars"], names, _plain(model_config), load=load, speed_factor=factor)


def latency_query(window: str) -> str:
    """The one Prometheus query of the engines' latency over `window` (module_utils.sglang_latency.prometheus_query,
    on the monitoring role's engine job and its role label)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import prometheus_query
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import ENGINE_JOB

    return prometheus_query(str(window), ENGINE_JOB)


def measured_latency(
    records: Sequence[Mapping[str, Any]],
    prometheus: Mapping[str, Any] | None = None,
    window: str = "",
    at: str = "",
    prometheus_host: str = "",
) -> dict[str, Any]:
    """The fleet's measured latency per engine role (module_utils.sglang_latency.measure) from the audit's records
    (each engine's /metrics histograms) and, where it answered, Prometheus over `window` (`prometheus`: the
    registered ansible.builtin.uri result of the latency_query; skipped or failed: the engines' /metrics alone)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_latency import measure

    engines = []
    for record in _plain(records):
        live = record.get("live") or {}
        if record.get("role") in ("prefill", "decode") and live.get("latency"):
            running = (live.get("load") or {}).get("running")
            engines.append({"host": record["host"], "role": record["role"], "latency": live["latency"],
                            "running": running})  # fmt: skip
    result = _plain(prometheus) or {}
    answer = result.get("json") if isinstance(result.get("json"), Mapping) else None
    notes = []
    if prometheus_host and not result.get("skipped") and answer is None:
        why = result.get("msg") or f"HTTP {result.get('status')}"
        notes.append(f"Prometheus on {prometheus_host} did not answer ({why}): the engines' /metrics instead")
    return measure(engines, answer, str(window), str(at), notes)


def audit_times(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, Any],
    model_config: Mapping[str, Any] | None,
    records: Sequence[Mapping[str, Any]],
    prometheus: Mapping[str, Any] | None,
    window: str,
    at: str,
    prometheus_host: str = "",
    predict: bool = True,
) -> dict[str, Any]:
    """The audit's times in one call ({predicted, measured}): the measured latency (measured_latency) and the model's
    predictions for the declared fleet and at the measured load (predicted_times), in `measured` as `at_load`; without
    a model config or with `predict` false, why nothing was predicted."""
    measured = measured_latency(records, prometheus, window, at, prometheus_host)
    if predict and model_config:
        times = predicted_times(hostvars, groups, model_config, measured)
    else:
        why = "no model config.json" if predict else "sglang_audit_predict_time is false"
        times = {"predicted": [], "at_load": {"unavailable": f"time: not predicted ({why})"}}
    return {"predicted": times["predicted"], "measured": {**measured, "at_load": times["at_load"]}}


def module_closure(program: str) -> list[str]:
    """The module_utils modules the program at path `program` needs on a host, sglang_closure.program_closure."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_closure as _closure

    return list(_closure.program_closure(program))


def file_entries(
    names: Sequence[str],
    src_dir: str,
    dest_dir: str,
    owner: str = "root",
    group: str = "root",
    mode: str = "0644",
    notify: str | None = None,
) -> list[dict[str, Any]]:
    """Copy entries ({src, dest, owner, group, mode, notify}) for files of one controller folder into one host
    folder, the shape sglang_paths_to_write and a copy loop take."""
    return [
        {"src": f"{src_dir}/{name}", "dest": f"{dest_dir}/{name}", "owner": owner, "group": group, "mode": mode}
        | ({"notify": notify} if notify else {})
        for name in names
    ]


def router_worker_specs(worker_map: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The declared workers as smg's worker API registers them."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    return list(_declared.router_worker_specs(_plain(worker_map)))


def router_worker_args(worker_map: Mapping[str, Any]) -> list[str]:
    """`--prefill URL PORT` and `--decode URL` serve-script lines for smg's PD mode."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared

    argv = _declared.router_argv_workers(_plain(worker_map))
    lines: list[str] = []
    for token in argv:
        if token.startswith("--"):
            lines.append(token)
        else:
            lines[-1] += " " + shlex.quote(token)
    return lines


def check_fleet(hostvars: Mapping[str, Any], groups: Mapping[str, Any], model_config: Mapping[str, Any]) -> list[str]:
    """Every problem of the inventory's envelope (plugin_utils check_fleet); [] means it may be deployed."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_validate as _validate

    names = {g: list(groups.get(g, [])) for g in (*_declared.GROUPS.values(), *_validate.COMPONENT_GROUPS)}
    hosts = sorted({h for members in names.values() for h in members})
    try:
        return list(_validate.check_fleet({h: hostvars[h] for h in hosts}, names, _plain(model_config)))
    except (ValueError, TypeError, KeyError) as exc:
        return [f"the envelope could not be checked: {exc!r}; fix: correct the declared values named above"]


def access_problems(hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> list[str]:
    """The routers and fronts beyond loopback without an API key (plugin_utils sglang_access), as problems."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_access import access_problems

    return access_problems(hostvars, groups)  # reads the router and front hosts only


def envelope_problems(
    type_errors: Sequence[str],
    models: Sequence[Any],
    model_config_found: bool,
    models_dir: Any,
    fleet_errors: Sequence[str],
    deep_problems: Sequence[str],
) -> list[str]:
    """Every problem of the declared envelope (plugin_utils envelope_problems): the type errors, the model of the
    engine hosts and whether its config was found, the fleet errors and the deep check's problems."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_validate as _validate

    return list(
        _validate.envelope_problems(
            _plain(type_errors),
            _plain(models),
            bool(model_config_found),
            str(models_dir),
            _plain(fleet_errors),
            _plain(deep_problems),
        )
    )


def sidedoor_warnings(hostvars: Mapping[str, Any], groups: Mapping[str, Any], known: Any = ()) -> list[str]:
    """Warnings of the side doors (plugin_utils sglang_sidedoors): extra environment variables SGLang does not read."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_sidedoors as _sidedoors

    names = {g: list(groups.get(g, [])) for g in _declared.GROUPS.values()}
    hosts = sorted({h for members in names.values() for h in members})
    try:
        return list(_sidedoors.sidedoor_warnings({h: hostvars[h] for h in hosts}, names, list(known or ())))
    except (ValueError, TypeError, KeyError):
        return []  # check_fleet reports what cannot be read


def fleet_risks(hostvars: Mapping[str, Any], groups: Mapping[str, Any], model_config: Mapping[str, Any]) -> list:
    """Risks of the declared envelope (plugin_utils sglang_risks), with validated fixes, smg's mesh where routers ask
    for it, and doors open without a key on purpose; warnings, not errors."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_plan as _plan
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_risks as _risks
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_access import open_door_risks

    declared = declared_fleet(hostvars, groups)
    fleet = _plan.Fleet(declared["hostvars"], declared["groups"])
    config = _plain(model_config)
    found = [f.as_dict() for f in _risks.risks(_risks.declared_state(fleet, config), fleet, config)]
    mesh = [f.as_dict() for f in _risks.mesh_risks(hostvars, groups)]
    return found + mesh + open_door_risks(hostvars, groups)


def rollout_plan(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, Any],
    model_config: Mapping[str, Any],
    tokens: int,
    min_parallel: int = 0,
) -> dict[str, list[str]]:
    """The one-server-at-a-time rollout: each engine server in order, with the capacity left while it is out
    (`lines`), and the steps that leave fewer than `min_parallel` parallel calls (`shortfalls`)."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_plan as _plan

    declared = declared_fleet(hostvars, groups)
    fleet = _plan.Fleet(declared["hostvars"], declared["groups"])
    whole, steps = _plan.rollout_plan(fleet, _plain(model_config), int(tokens))
    load = int(min_parallel) or None
    return {
        "lines": _plan.render_plan(whole, steps, int(tokens), load),
        "shortfalls": _plan.rollout_shortfalls(steps, int(min_parallel), int(tokens)),
    }


def risk_lines(findings: Sequence[Mapping[str, Any]]) -> list[str]:
    """The risk findings (sglang_fleet_risks) as the report's lines: each risk, its figures and its validated fixes."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_risks as _risks

    return list(_risks.render(findings))


# The variables the deep check reads of each host (the API key only as "set or not").
_DEEP_VARS = (
    "sglang_model",
    "sglang_engine_common",
    "sglang_prefill",
    "sglang_decode",
    "sglang_router",
    "sglang_advertise_host",
    "sglang_listen_host",
    "ansible_host",
    "sglang_engine_extra_env",
    "sglang_router_extra_args",
)


def deep_check(hostvars: Mapping[str, Any], groups: Mapping[str, Any], settings: Mapping[str, Any]) -> dict:
    """SGLang's and smg's own startup checks on every rendered command line (plugins/plugin_utils/sglang_deep.py):
    {problems, warnings, stats}."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_deep as _deep

    names = {g: list(groups.get(g, [])) for g in _declared.GROUPS.values()}
    hosts = sorted({h for members in names.values() for h in members})
    picked = {}
    for host in hosts:
        picked[host] = pick(hostvars[host], _DEEP_VARS)
        if hostvars[host].get("sglang_api_key"):
            picked[host]["sglang_api_key"] = _SECRET_SET
    return _plain(_deep.deep_check(picked, names, _plain(settings)))


def engine_limits(envelope: Mapping[str, Any], hostvars: Mapping[str, Any], model_config: Mapping[str, Any]) -> dict:
    """Capacity-model limits of a declared engine envelope on its host (pool, running requests, context)."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_engine_rules import engine_limits as _limits

    limits = _limits(_plain(model_config), _plain(envelope), hostvars)
    return {
        "context_len": limits.context_len,
        "max_total_num_tokens": limits.max_total_num_tokens,
        "max_running_requests": limits.max_running_requests,
        "max_req_input_len": limits.max_req_input_len,
        "token_capacity_swa": limits.token_capacity_swa,
        "kv_cache_gib": limits.memory_usage["kvcache"],
        "weights_gib": limits.memory_usage["weight"],
        "full_length_requests": limits.max_total_num_tokens // max(1, limits.context_len),
    }


def pick(hostvars: Mapping[str, Any], names: Any) -> dict[str, Any]:
    """The named variables a host defines (only those are read, so unrelated variables are never templated)."""
    return {name: _plain(hostvars[name]) for name in names if name in hostvars}


_ARGUMENT = re.compile(
    r"argument '(?P<name>[^']+)'(?: is of type \S+)?(?: found in '(?P<parent>[^']+)')?"
    r"|value of (?P<cname>\w+) must be one of: .*? found in (?P<cparent>\w+)"
    r"|value of (?P<tname>\w+) must be one of"
)
_TYPE_NOISE = re.compile(r": <class '[^']+'> cannot be converted to an? \w+")


def argument_errors(results: list[Mapping[str, Any]], hostvars: Mapping[str, Any], spec: Mapping[str, Any]) -> list:
    """Messages of ansible.builtin.validate_argument_spec results (one per host, `item` = host), each naming
    the host, the variable, its value (never for no_log options) and the fix."""
    messages = []
    for result in results:
        host = str(result.get("item"))
        for error in result.get("argument_errors") or []:
            text = _TYPE_NOISE.sub("", str(error))
            match = _ARGUMENT.search(text)
            if not match:
                messages.append(f"{host}: {text}; fix: see entry point inventory of sglang_validate's argument_specs")
                continue
            name = match["name"] or match["cname"] or match["tname"]
            parent = match["parent"] or match["cparent"]
            top = parent or name
            option = (spec.get(top) or {}) if not parent else ((spec.get(top) or {}).get("options") or {}).get(name, {})
            variable = f"{parent}.{name}" if parent else name
            value = ""
            if not option.get("no_log") and not (spec.get(top) or {}).get("no_log"):
                declared = _plain(hostvars[host].get(top)) if top in hostvars[host] else None
                if parent and isinstance(declared, Mapping):
                    declared = declared.get(name)
                value = f"={declared!r}"
            wanted = option.get("type", "value")
            choices = f" (one of {', '.join(map(str, option['choices']))})" if option.get("choices") else ""
            messages.append(f"{host}: {variable}{value}: {text}; fix: declare a {wanted}{choices}")
    return messages


def unit_names(_ignored: Any = None) -> dict[str, str]:
    """systemd unit name (without .service) of each server role."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_layout as _layout

    return dict(_layout.UNIT_NAMES)


def server_layout(role: str, envelope: Mapping[str, Any], places: Mapping[str, Any]) -> dict[str, Any]:
    """One server's layout (plugins/module_utils/sglang_layout.py): unit, files with owner, group and mode, facts file,
    listeners, connect and health URLs; `places` is sglang_defaults_layout."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_layout as _layout

    return _plain(_layout.server_layout(role, _plain(envelope), _plain(places)))


_ENV_SAFE = re.compile(r"^[A-Za-z0-9_./:@%+,=-]*$")


def audit_server(
    role: str,
    hostvars: Mapping[str, Any],
    api_key: Any,
    places: Mapping[str, Any],
    workers: Mapping[str, Any],
    model_text: Any,
    releases_dir: str,
    keep_releases: Any,
    mesh: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One server of this host as the audit sees it, its envelope and layout worked out once: `record`, what the report
    judges it against (sglang_drift.judge: the declared envelope with a router's smg `mesh` keys, the files the deploy
    writes, the router's expected `workers`, the model's inputs from `model_text`), and `read`, what
    sglang_servers_info reads on the host."""
    engine = role != "router"
    declared = (
        engine_envelope(hostvars, role, api_key)
        if engine
        else {**router_envelope(hostvars, api_key), **_plain(mesh or {})}
    )
    layout = server_layout(role, declared, places)
    return {
        "record": {
            "host": hostvars["inventory_hostname"],
            "role": role,
            "declared": declared,
            "declared_files": layout["files"],
            "expected_workers": None if engine else _plain(workers),
            "model": model_inputs(hostvars, model_text) if engine else None,
        },
        "read": {
            "role": role,
            **{k: layout[k] for k in ("unit", "script", "env_file", "facts_file", "release_fact_file")},
            "unit_dir": str(PurePosixPath(layout["unit_file"]).parent),
            "releases_dir": str(releases_dir) if engine else None,
            "keep_releases": int(keep_releases),
            "endpoint": layout["url"],
            "metrics": declared.get("enable_metrics", True) is not False,
        },
    }


def secret_environ(api_key: str, redacted: bool = False) -> dict[str, str]:
    """The environment file's secret variables for a declared API key; redacted where the file is only previewed
    (plugins/module_utils/sglang_flags.py)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_flags as _flags

    return _flags.secret_environ(str(api_key or ""), bool(redacted))


def env_quote(value: Any) -> str:
    """A value for a systemd EnvironmentFile line: bare when safe, else double-quoted with escapes."""
    text = str(value)
    if _ENV_SAFE.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$").replace("\n", "\\n") + '"'


def unit_value(value: Any) -> str:
    """A systemd directive value (plugins/module_utils/sglang_layout.py: booleans as yes/no)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_layout as _layout

    return _layout.unit_value(value)


def preflight_imports(command: list[str], backend: str | None) -> dict[str, str]:
    """Module -> why the engine imports it (plugins/module_utils/sglang_preflight.py)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_preflight as _preflight

    return _preflight.engine_imports(command, backend)


def argv(envelope: Mapping[str, Any], role: str) -> list[str]:
    """The engine's flags after `sglang serve`, as its serve script passes them (codec to_argv; the API key as the
    script's ${SGLANG_API_KEY} reference)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_flags as _flags

    return list(_flags.to_argv(role, _plain(envelope)))


def startup_check_files(unused: Any = None) -> dict[str, Any]:
    """The deep check's script that runs SGLang's own startup checks (roles/sglang_validate/files): `script`, the file
    to run, and `files`, its text and its helper's by file name, for the preflight to run them on the host."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_deep as _deep

    names = (_deep.SGLANG_CHECKER, "sglang_cpu.py")
    return {"script": _deep.SGLANG_CHECKER, "files": {n: (_deep.FILES_DIR / n).read_text() for n in names}}


def transfer_needs(hostvars: Mapping[str, Any], group_names: list[str]) -> dict[str, Any]:
    """What a host's release needs for the PD transfer backends its engines declare (SGLang's default where none is
    declared): pinned pip `requirements` and the `imports` a release check loads
    (plugins/module_utils/sglang_preflight.py TRANSFER_PACKAGES)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_argspec as _argspec
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared as _declared
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_preflight as _preflight

    key = "disaggregation_transfer_backend"
    roles = [role for role in ("prefill", "decode") if f"sglang_{role}" in group_names]
    backends = [_declared.engine_envelope(role, hostvars).get(key) or _argspec.default_of(role, key) for role in roles]
    return _preflight.transfer_needs([str(b) for b in backends])


def source_digest(root: str, paths: list[str], salt: str = "", length: int = 12) -> str:
    """Short sha256 over `salt` and the relative paths and contents of the files at `paths` under `root`
    (directories recursively, caches skipped): a release id that changes exactly when its inputs change."""
    base = Path(root)
    files: set[Path] = set()
    for name in paths:
        path = base / name
        if path.is_dir():
            files.update(p for p in path.rglob("*") if p.is_file())
        elif path.is_file():
            files.add(path)
        else:
            raise ValueError(f"{path} does not exist; fix: correct the source paths of the release")
    skip = ("__pycache__", ".egg-info", ".pytest_cache", ".mypy_cache", ".ruff_cache")
    digest = hashlib.sha256(salt.encode() + b"\0")
    for path in sorted(files):
        rel = path.relative_to(base)
        if any(part.endswith(skip) for part in rel.parts) or path.suffix == ".pyc":
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:length]


def releases_to_prune(
    found: Sequence[Mapping[str, Any]], releases_dir: str, linked: Sequence[str], keep: int
) -> list[str]:
    """Names of the releases to remove, from ansible.builtin.find over `releases_dir` (depth 2): its folders
    are the releases, a manifest.json inside one marks it complete; `linked` holds the link targets."""
    from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_releases as _releases

    root = releases_dir.rstrip("/")
    paths = {str(item["path"]) for item in found}
    releases = {
        Path(item["path"]).name: (float(item["mtime"]), f"{item['path']}/manifest.json" in paths)
        for item in found
        if item.get("isdir") and str(Path(item["path"]).parent) == root
    }
    return list(_releases.releases_to_prune(releases, [Path(t).name for t in linked], keep))


def to_fact_json(value: Any) -> str:
    """The facts record's text as sglang_deploy_records writes it (its SHA-1 tells a write that changes nothing)."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import record_text

    return record_text(_plain(value))


def audit_records(hostvars: Mapping[str, Any], hosts: Sequence[str]) -> list[dict[str, Any]]:
    """Every record the audit kept on `hosts` (`sglang_audit_records`); a host without records is unreachable."""
    records: list[dict[str, Any]] = []
    for host in hosts:
        kept = hostvars[host].get("sglang_audit_records") if host in hostvars else None
        if kept is None:
            records.append({"host": host, "role": "host", "host_unreachable": "the audit did not read this host"})
        else:
            records += [_plain(r) for r in kept]
    return records


# The declared variables the capacity model, the validation and the planner read; nothing secret.
_FLEET_VARS = (
    "sglang_model", "sglang_gpu_memory_gib", "sglang_gpus_per_host", "sglang_engine_common", "sglang_prefill",
    "sglang_decode", "sglang_router", "sglang_workload", "sglang_advertise_host", "ansible_host",
)  # fmt: skip


def declared_fleet(hostvars: Mapping[str, Any], groups: Mapping[str, Any]) -> dict[str, Any]:
    """The declared fleet for the audit's risk fixes: the envelope variables of every SGLang host, without keys."""
    names = [n for n in ("sglang_prefill", "sglang_decode", "sglang_router") if n in groups]
    hosts = sorted({h for n in names for h in groups[n]})
    out: dict[str, Any] = {}
    for host in hosts:
        picked = {k: _plain(hostvars[host][k]) for k in _FLEET_VARS if k in hostvars[host]}
        out[host] = {k: {i: v for i, v in d.items() if i != "api_key"} if isinstance(d, dict) else d
                     for k, d in picked.items()}  # fmt: skip
    return {"hostvars": out, "groups": {n: list(groups[n]) for n in names}}


def monitoring(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, Any],
    model_config: Mapping[str, Any],
    settings: Mapping[str, Any],
    places: Mapping[str, Any],
) -> dict[str, Any]:
    """What the sglang_monitoring role writes: {rules (YAML text), dashboard (JSON text), prometheus (dict),
    exporters ({engine host: drift-exporter servers})}. `settings`: the sglang_monitoring_* variables; `places`:
    the directories and file modes of the server layout (sglang_defaults_layout)."""
    import yaml  # the controller's (Ansible's own dependency)
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_alerts as _alerts
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_monitoring as _monitoring

    # Plain JSON values: Ansible's tagged strings are not YAML-serializable.
    declared = json.loads(json.dumps(declared_fleet(hostvars, groups)))
    plain_hv, names = declared["hostvars"], declared["groups"]
    config = json.loads(json.dumps(_plain(model_config)))
    fl = _alerts.fleet(plain_hv, names, config)
    prefixed = {
        k: v for k, v in json.loads(json.dumps(_plain(settings))).items() if k.startswith(_alerts.POLICY_PREFIX)
    }
    policy = _alerts.Policy.from_vars(_alerts.policy_vars(prefixed))
    scrape = _monitoring.Scrape(
        **{
            k: prefixed[f"sglang_monitoring_{k}"]
            for k in _monitoring.Scrape.__dataclass_fields__
            if f"sglang_monitoring_{k}" in prefixed
        }
    )
    groups_ = _alerts.all_alerts(fl, policy, fronted=bool(scrape.fronts))
    engine_hosts = sorted({e.host for e in fl.engines})
    # grafana-foundation-sdk, on the controller only: imported where used
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_dashboard as dashboard

    return {
        "rules": yaml.safe_dump(_alerts.rule_file(groups_), sort_keys=False, width=1000),
        "dashboard": json.dumps(dashboard.build(fl, policy), indent=1) + "\n",
        "prometheus": _monitoring.prometheus_config(fl, plain_hv, engine_hosts, scrape),
        "exporters": {
            h: _monitoring.exporter_servers(
                fl, h, plain_hv[h], config, _SECRET_SET if hostvars[h].get("sglang_api_key") else None, _plain(places)
            )
            for h in engine_hosts
        },
    }


def render_entries(files: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A role's file entries ({dest, content, mode?, validate?}) as sglang_render_files entries: each keeps its
    deploy's `validate:` command as its check; a systemd unit is checked by systemd-analyze verify."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_filecheck as _filecheck

    out = []
    for entry in files:
        dest = str(entry["dest"])
        unit = dest.startswith("/etc/systemd/") and dest.endswith(_filecheck.UNIT_SUFFIXES)
        check = str(entry.get("validate") or (_filecheck.UNIT_CHECK if unit else ""))
        out.append({"path": dest, "content": str(entry["content"]), "mode": entry.get("mode", "0644"), "check": check})
    return out


def unit_declared(sources: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each directive of a unit mapped to the declared variable that sets it ({variable: {Section: {Directive: v}}}
    or {variable: {Directive: v}} for a flat one such as sglang_common_hardening); the later source wins."""
    found: dict[str, str] = {}
    for var, sections in sources.items():
        for name, value in (sections or {}).items():
            if isinstance(value, Mapping):
                found.update({str(d): f"{var}.{name}.{d}" for d in value})
            else:
                found[str(name)] = f"{var}.{name}"
    return found


def check_rendered(render_dir: str, cache_dir: str = "") -> dict[str, Any]:
    """Every file of render_dir checked by its own program on the controller (plugin_utils/sglang_filecheck)."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_filecheck as _filecheck

    return _filecheck.check_rendered(render_dir, cache_dir or None)


class FilterModule:
    """sglang_* filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "sglang_engine_envelope": engine_envelope,
            "sglang_audit_server": audit_server,
            "sglang_router_envelope": router_envelope,
            "sglang_render_args": render_args,
            "sglang_secret_environ": secret_environ,
            "sglang_environ": environ,
            "sglang_public_envelope": public_envelope,
            "sglang_workers": workers,
            "sglang_routers": routers,
            "sglang_advertised": advertised,
            "sglang_router_mesh": router_mesh,
            "sglang_local_url": local_url,
            "sglang_model_inputs": model_inputs,
            "sglang_model_config": model_config,
            "sglang_files_to_write": files_to_write,
            "sglang_paths_to_write": paths_to_write,
            "sglang_file_entries": file_entries,
            "sglang_entry_differs": entry_differs,
            "sglang_entries_differing": entries_differing,
            "sglang_preflight_stamps": preflight_stamps,
            "sglang_healthy": healthy,
            "sglang_audit_times": audit_times,
            "sglang_latency_query": latency_query,
            "sglang_gate_message": gate_message,
            "sglang_gate_probe_text": gate_probe_text,
            "sglang_gate_settled": gate_settled,
            "sglang_module_closure": module_closure,
            "sglang_router_worker_args": router_worker_args,
            "sglang_router_worker_specs": router_worker_specs,
            "sglang_check_fleet": check_fleet,
            "sglang_sidedoor_warnings": sidedoor_warnings,
            "sglang_envelope_problems": envelope_problems,
            "sglang_declared_fleet": declared_fleet,
            "sglang_fleet_risks": fleet_risks,
            "sglang_access_problems": access_problems,
            "sglang_risk_lines": risk_lines,
            "sglang_rollout_plan": rollout_plan,
            "sglang_deep_check": deep_check,
            "sglang_engine_limits": engine_limits,
            "sglang_unit_names": unit_names,
            "sglang_server_layout": server_layout,
            "sglang_pick": pick,
            "sglang_argument_errors": argument_errors,
            "sglang_env_quote": env_quote,
            "sglang_unit_value": unit_value,
            "sglang_preflight_imports": preflight_imports,
            "sglang_transfer_needs": transfer_needs,
            "sglang_argv": argv,
            "sglang_startup_check_files": startup_check_files,
            "sglang_source_digest": source_digest,
            "sglang_releases_to_prune": releases_to_prune,
            "sglang_fact_json": to_fact_json,
            "sglang_audit_records": audit_records,
            "sglang_monitoring": monitoring,
            "sglang_render_entries": render_entries,
            "sglang_unit_declared": unit_declared,
            "sglang_check_rendered": check_rendered,
        }
