"""What a host should look like, derived from the inventory and the role defaults (nothing declared twice).

Variables come from the same inventory the tests run against (testinfra's ansible backend runs
`ansible-inventory --list`), layered over the defaults of the roles that deploy the stack, and are rendered
with Ansible's own templar. The envelopes are built by the project's core (sglang_declared), the units, files,
owners, modes, listeners and URLs by the server layout the roles use (sglang_layout.server_layout over the
sglang_defaults role's directories and modes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_declared, sglang_layout

REPO = Path(__file__).resolve().parents[1]
ROLES = REPO / "collections/ansible_collections/sglang/dsv4/roles"
# Later roles win on a name clash (none today); the inventory wins over all of them.
DEFAULTS_OF = ("sglang_defaults", "sglang_common", "sglang_build", "sglang_engine", "sglang_router")
ENGINE_ROLES = ("prefill", "decode")
SERVER_ROLES = (*ENGINE_ROLES, "router")

# Verification settings (inventory variables, all optional).
VERIFY_DEFAULTS: dict[str, Any] = {
    "sglang_verify_probes": False,  # envelope probes through the router (lab: on; production: off)
    "sglang_verify_probe_max_parallel": 400,  # fan-out cap of the parallel probe
    "sglang_verify_probe_extra": 4,  # requests sent beyond max_concurrent + queue_size (expect 429)
    "sglang_verify_probe_hold_secs": 2.0,  # how long each admitted probe request generates
    "sglang_verify_probe_reject_secs": 1.0,  # a 429 must come back within this
    "sglang_verify_probe_max_total": 48,  # cap of the total-context probe's concurrent long requests
    "sglang_verify_probe_deadline_secs": 45,  # hard bound of one probe run on the host
    "sglang_verify_probe_token_id": 100,  # token id repeated to build exact-length prompts
    "sglang_verify_recall_probe": False,  # needle-in-a-haystack recall through the router (off everywhere)
    "sglang_verify_recall_route": "chat",  # chat (/v1/chat/completions) or generate (/generate)
    "sglang_verify_recall_timeout_secs": 300,  # per recall request
    "sglang_verify_extra_listeners": [],  # "ADDR:PORT" patterns a server may listen on besides its own
    "sglang_verify_gpu_memory_tolerance": 0.05,  # nvidia-smi memory vs sglang_gpu_memory_gib
    "sglang_verify_http_timeout": 5.0,  # seconds per HTTP call the checks make on the host
    "sglang_verify_python": "python3",  # interpreter on the host that runs the check and probe scripts
    # The time probe (test_verify_time.py, with the envelope probes): streamed requests one at a time through the
    # router, their median TTFT and ITL within this share of the time model's prediction for that workload (0.5:
    # 50 % to 150 % of it; on the simulator the prediction divided by its SGLANG_SIM_SPEED_FACTOR).
    "sglang_verify_time_tolerance": 0.5,
    "sglang_verify_time_requests": 3,  # requests of the time probe, one after another
    "sglang_verify_time_input_tokens": 1000,  # prompt tokens of each
    "sglang_verify_time_output_tokens": 32,  # output tokens of each
}

# Variables rendered before the envelopes are built (the rest stays raw).
_RENDER = (
    "sglang_model",
    "sglang_gpu_memory_gib",
    "sglang_engine_common",
    "sglang_prefill",
    "sglang_decode",
    "sglang_router",
    "sglang_advertise_host",
    "sglang_listen_host",
    "ansible_host",
    "sglang_defaults_user",
    "sglang_defaults_group",
    "sglang_defaults_bin_dir",
    "sglang_defaults_env_dir",
    "sglang_defaults_facts_dir",
    "sglang_defaults_facts_file",
    "sglang_defaults_releases_dir",
    "sglang_defaults_current_link",
    "sglang_defaults_file_modes",
    "sglang_defaults_dir_modes",
    "sglang_defaults_layout",
    "sglang_common_proc_hidepid",
    "sglang_common_proc_group",
    "sglang_engine_install",
    "sglang_build_source",
    "sglang_build_source_sha",
    "sglang_build_wheel_sha256",
    *VERIFY_DEFAULTS,
)


# What the time model reads of each engine host beyond the envelope (the simulator's speed factor, the workload).
FLEET_VARS = ("sglang_engine_command", "sglang_engine_extra_env", "sglang_workload")


def _load_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text())
    return data if isinstance(data, dict) else {}


def role_defaults() -> dict[str, Any]:
    """defaults/main.yml of the deploying roles, merged (role_path is per role, so it is set per file)."""
    merged: dict[str, Any] = {}
    for role in DEFAULTS_OF:
        merged.update(_load_yaml(ROLES / role / "defaults" / "main.yml"))
    return merged


def _is_vaulted(value: Any) -> bool:
    return isinstance(value, Mapping) and "__ansible_vault" in value


def _trusted(value: Any) -> Any:
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, str):
        return str(value)
    return value


def render_vars(raw: Mapping[str, Any], names: tuple[str, ...] = _RENDER) -> dict[str, Any]:
    """The inventory variables of one host over the role defaults, with `names` rendered by Ansible's templar.

    Vaulted values are never decrypted: they only count as set.
    """
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    layered = {**VERIFY_DEFAULTS, **role_defaults(), **raw}
    layered["role_path"] = str(ROLES / "sglang_engine")
    safe = {k: ("<vaulted>" if _is_vaulted(v) else v) for k, v in layered.items()}
    templar = Templar(loader=DataLoader(), variables=_trusted(safe))
    out = dict(safe)
    for name in names:
        if name in safe:
            out[name] = _plain(templar.template(_trusted(safe[name])))
    for name in ("sglang_engine_api_key", "sglang_router_api_key"):
        out[name] = _secret_set(name, layered, templar)
    return out


def _secret_set(name: str, layered: Mapping[str, Any], templar: Any) -> bool:
    """Whether an API key is declared (its value is never kept)."""
    if _is_vaulted(layered.get(name)) or _is_vaulted(layered.get("sglang_api_key")):
        return True
    if name not in layered:
        return False
    return bool(str(templar.template(_trusted(layered[name])) or ""))


@dataclass(frozen=True)
class Server:
    """One server (engine or router) a host runs, as the inventory declares it."""

    role: str
    unit: str
    script: str
    env_file: str
    unit_file: str
    envelope: dict[str, Any]
    api_key: bool
    listeners: tuple[tuple[str, int], ...]  # (address, port); address "*" = any
    base_url: str  # how the checks reach it from the host itself
    health_url: str
    files: dict[str, dict[str, Any]]  # script, env_file, unit: path, owner, group, mode

    @property
    def bf16_index_k(self) -> bool:
        return self.envelope.get("bf16_index_k") is True


@dataclass
class HostPlan:
    """Everything the verify suite expects on one host."""

    name: str
    user: str
    group: str
    bin_dir: str
    env_dir: str
    fact_file: str
    modes: dict[str, dict[str, Any]]  # sglang_defaults_file_modes (facts) and sglang_defaults_dir_modes
    servers: dict[str, Server]
    workers: dict[str, Any]  # sglang_declared.workers() of the whole inventory
    settings: dict[str, Any]
    model: dict[str, Any]
    gpu_memory_gib: float | None
    model_inputs: dict[str, Any] | None  # the capacity model's inputs, as the audit judges with them
    install: str
    current_link: str
    build_sha: str
    releases_dir: str
    gpu_ids: dict[str, list[int]] = field(default_factory=dict)
    proc_group: str | None = None  # /proc is mounted hidepid=invisible with this group exempt (None: not managed)

    def files(self) -> dict[str, dict[str, Any]]:
        """Path -> expected owner, group and mode, for every file and directory the roles create here."""
        out: dict[str, dict[str, Any]] = {}
        if not self.servers:
            return out

        def spec(meta: Mapping[str, Any], what: str) -> dict[str, Any]:
            return {"mode": int(str(meta["mode"]), 8), "user": meta["owner"], "group": meta["group"], "what": what}

        out[self.bin_dir] = spec(self.modes["bin_dir"], "script directory")
        out[self.env_dir] = spec(self.modes["env_dir"], "environment directory")
        out[self.fact_file] = spec(self.modes["facts"], "local facts")
        for s in self.servers.values():
            for name, what in (("script", "serve script"), ("env_file", "environment file"), ("unit", "unit")):
                out[s.files[name]["path"]] = spec(s.files[name], f"{s.role} {what}")
        return out


def _model_inputs(v: Mapping[str, Any]) -> dict[str, Any] | None:
    """The capacity model's inputs of an engine host, from the model's config.json beside the roles (the audit's)."""
    config = REPO / "models" / str((v.get("sglang_model") or {}).get("name") or "none") / "config.json"
    return sglang_declared.model_inputs(v, json.loads(config.read_text())) if config.is_file() else None


def probes_off(plan: HostPlan, wanted: bool | None) -> str | None:
    """Why the probes through the router do not run on this host (None: they do); `wanted` is --probes (True),
    --no-probes (False) or neither (None: sglang_verify_probes)."""
    if "router" not in plan.servers:
        return f"{plan.name} does not serve router (not in group sglang_router)"
    if wanted is False:
        return "envelope probes are off (--no-probes)"
    if wanted is None and not plan.settings["sglang_verify_probes"]:
        return "envelope probes are off (sglang_verify_probes is false; --probes turns them on)"
    return None


def inventory_fleet(
    all_raw: Mapping[str, Mapping[str, Any]],
) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """(host variables, groups) of every SGLang host of the inventory, rendered as the time model reads a fleet
    (sglang_perf_fleet.fleet_shape_of, sim_speed_factor)."""
    raw = next(iter(all_raw.values()), {})
    groups = {str(g): list(h) for g, h in (raw.get("groups") or {}).items()}
    hosts = {h for g in sglang_declared.GROUPS.values() for h in groups.get(g, [])}
    return {h: render_vars(all_raw[h], (*_RENDER, *FLEET_VARS)) for h in sorted(hosts)}, groups


def build_plan(host: str, raw_vars: Mapping[str, Any], all_raw: Mapping[str, Mapping[str, Any]]) -> HostPlan:
    """The plan of `host` from its raw inventory variables; `all_raw` holds every host's (for the workers)."""
    v = render_vars(raw_vars)
    groups: Mapping[str, list[str]] = raw_vars.get("groups") or {}
    group_names = set(raw_vars.get("group_names") or [])
    places = v["sglang_defaults_layout"]
    servers: dict[str, Server] = {}
    gpu_ids: dict[str, list[int]] = {}
    for role in SERVER_ROLES:
        if sglang_declared.GROUPS[role] not in group_names:
            continue
        if role == "router":
            envelope = sglang_declared.router_envelope(v)
            api_key = bool(v["sglang_router_api_key"])
        else:
            envelope = sglang_declared.engine_envelope(role, v)
            gpu_ids[role] = [int(g) for g in envelope.get("gpu_ids") or []]
            api_key = bool(v["sglang_engine_api_key"])
        layout = sglang_layout.server_layout(role, envelope, places)
        servers[role] = Server(
            role,
            layout["unit"],
            layout["script"],
            layout["env_file"],
            layout["unit_file"],
            envelope,
            api_key,
            tuple((str(a), int(p)) for a, p in layout["listeners"]),
            layout["url"],
            layout["health_url"],
            layout["files"],
        )
    workers: dict[str, Any] = {"prefill": [], "decode": []}
    if "router" in servers:
        engine_hosts = {h for g in ("sglang_prefill", "sglang_decode") for h in groups.get(g, [])}
        rendered = {h: render_vars(all_raw[h]) for h in engine_hosts}
        names = {g: list(groups.get(g, [])) for g in sglang_declared.GROUPS.values()}
        workers = sglang_declared.workers(rendered, names)
    settings = {k: v.get(k, d) for k, d in VERIFY_DEFAULTS.items()}
    return HostPlan(
        name=host,
        proc_group=str(v["sglang_common_proc_group"]) if servers and v.get("sglang_common_proc_hidepid") else None,
        user=str(v["sglang_defaults_user"]),
        group=str(v["sglang_defaults_group"]),
        bin_dir=str(v["sglang_defaults_bin_dir"]),
        env_dir=str(v["sglang_defaults_env_dir"]),
        fact_file=str(v["sglang_defaults_facts_file"]),
        modes={"facts": v["sglang_defaults_file_modes"]["facts"], **v["sglang_defaults_dir_modes"]},
        servers=servers,
        workers=workers,
        settings=settings,
        model=dict(v.get("sglang_model") or {}),
        model_inputs=_model_inputs(v),
        gpu_memory_gib=float(v["sglang_gpu_memory_gib"]) if v.get("sglang_gpu_memory_gib") else None,
        install=str(v.get("sglang_engine_install") or ""),
        current_link=str(v["sglang_defaults_current_link"]),
        # The build role names a release after its source: the wheel's sha256, or the fork's commit.
        build_sha=str(
            v.get("sglang_build_source_sha" if v.get("sglang_build_source") == "git" else "sglang_build_wheel_sha256")
            or ""
        ),
        releases_dir=str(v["sglang_defaults_releases_dir"]),
        gpu_ids=gpu_ids,
    )
