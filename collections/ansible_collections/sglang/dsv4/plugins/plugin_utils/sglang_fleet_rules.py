"""The rules between the servers of one host (scope `fleet`): each listener its own port, each engine its own GPUs.
A server is checked against the ports and GPUs the servers before it on the host claimed; after the servers, the
listeners of the other components on the host (component_listeners: the front, Prometheus, Alertmanager,
node_exporter) are checked the same way, so one port map per host holds every listener the deploy renders."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import declared_var

from .sglang_rules import PORT_RANGE, Finding, Rule, in_range

PORT_KEYS = ("port", "disaggregation_bootstrap_port", "prometheus_port")
# A port the server opens when its key is unset: its parser's default (a decode engine opens no bootstrap port).
DEFAULT_PORTS = {("prefill", "disaggregation_bootstrap_port"), ("router", "prometheus_port")}
ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"


@cache
def role_default(role: str, name: str) -> Any:
    """The default of a role variable as its meta/argument_specs.yml states it (roles/<role>), else None."""
    import yaml  # the controller's (Ansible's own dependency)

    specs = yaml.safe_load((ROLES_DIR / role / "meta" / "argument_specs.yml").read_text())
    return next((e["options"][name].get("default") for e in specs["argument_specs"].values()
                 if name in e.get("options", {})), None)  # fmt: skip


def _listen_port(listen: Any) -> int | None:
    """The port of an `address:port` listen setting (Prometheus's --web.listen-address)."""
    tail = str(listen).rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


@cache
def front_metrics_port() -> Any:
    """HAProxy's stats and metrics port when sglang_frontend_stats_port is unset (sglang_defaults_frontend)."""
    import yaml

    defaults = yaml.safe_load((ROLES_DIR / "sglang_defaults" / "defaults" / "main.yml").read_text())
    return defaults["sglang_defaults_frontend"]["metrics_port"]


def monitoring_host(groups: Mapping[str, Sequence[str]]) -> str | None:
    """The host of Prometheus and Alertmanager (sglang_defaults_monitoring_server): the first sglang_monitoring
    host, else the first router; None without either."""
    return next(iter([*groups.get("sglang_monitoring", []), *groups.get("sglang_router", [])]), None)


def component_listeners(
    host: str, hostvars: Mapping[str, Any], groups: Mapping[str, Sequence[str]]
) -> list[tuple[str, int]]:
    """(variable, port) of every listener on `host` that is not an engine or router: the HAProxy front and its stats
    page (sglang_frontend hosts), Prometheus and Alertmanager (the monitoring server: the first sglang_monitoring
    host, else the first router), node_exporter (every engine host)."""

    def value(name: str, role: str, default: Any = None) -> Any:
        declared = hostvars.get(name)
        return declared if declared is not None else (default if default is not None else role_default(role, name))

    out: list[tuple[str, Any]] = []
    if host in groups.get("sglang_frontend", []):
        out.append(("sglang_frontend_port", value("sglang_frontend_port", "sglang_frontend")))
        stats = value("sglang_frontend_stats_port", "sglang_frontend", front_metrics_port())
        out.append(("sglang_frontend_stats_port", stats))
    if monitoring_host(groups) == host:
        for name in ("sglang_monitoring_prometheus_listen", "sglang_monitoring_alertmanager_listen"):
            out.append((name, _listen_port(value(name, "sglang_monitoring"))))
    if host in {*groups.get("sglang_prefill", []), *groups.get("sglang_decode", [])}:
        name = "sglang_monitoring_node_exporter_port"
        out.append((name, value(name, "sglang_monitoring")))
    return [(var, int(port)) for var, port in out if str(port).isdigit() and not isinstance(port, bool)]


@dataclass(frozen=True)
class ServerContext:
    """One server's envelope on its host, with the ports and GPUs claimed before it there (number -> claimant)."""

    host: str
    role: str
    env: Mapping[str, Any]
    ports_before: Mapping[int, str]
    gpus_before: Mapping[int, str]
    hostvars: Mapping[str, Any] = field(default_factory=dict)
    extra: Sequence[tuple[str, int]] = ()  # other listeners: the mesh port, or a component's (component_listeners)

    def _var(self, key: str) -> str:
        if self.role == "router":
            return f"sglang_router.{key}"
        return declared_var(self.role, self.hostvars, key) if self.hostvars else f"sglang_{self.role}.{key}"

    @property
    def ports(self) -> list[tuple[str, int]]:
        """(variable, port) of each port in 1..65535 the server listens on (others have their own rule): the declared
        ones, the parser's default of an unset one it opens anyway, then `extra`."""
        found = []
        for key in PORT_KEYS if self.role in ("prefill", "decode", "router") else ():
            port = self.env.get(key)
            if port is None and (self.role, key) in DEFAULT_PORTS:
                port = default_of(self.role, key)
                found.append((f"{self._var(key)} (unset: its default {port})", port))
            else:
                found.append((self._var(key), port))
        found += self.extra
        return [(v, p) for v, p in found if isinstance(p, int) and PORT_RANGE[0] <= p <= PORT_RANGE[1]]

    @property
    def gpus(self) -> list[Any]:
        return [] if self.role == "router" else list(self.env.get("gpu_ids") or [])


def _ports_free(c: ServerContext) -> Iterator[Finding]:
    claimed = dict(c.ports_before)
    for var, port in c.ports:
        if port in claimed:
            yield Finding(
                f"{c.host}: {var}",
                port,
                f"port already used by {claimed[port]}",
                "give each server on a host its own ports",
            )
        claimed[port] = var


def _gpus_free(c: ServerContext) -> Iterator[Finding]:
    claimed = dict(c.gpus_before)
    for gpu in c.gpus:
        if int(gpu) in claimed:
            yield Finding(
                f"{c.host}: {c._var('gpu_ids')}",
                c.env["gpu_ids"],
                f"GPU {gpu} is already used by {claimed[int(gpu)]}",
                "give each engine its own GPUs",
            )
        claimed[int(gpu)] = f"sglang_{c.role}"


def _component_port_range(c: ServerContext) -> Iterator[Finding]:
    """The listeners of the other components (the engines' and routers' ports have engine.port and router.port)."""
    for var, port in c.extra if c.role == "components" else ():
        says = (
            f"HAProxy refuses the bind (haproxy -c: 'bind' : invalid port '{port}')"
            if var.startswith("sglang_frontend_")
            else "the kernel picks a port, which Prometheus does not know"
            if port == 0
            else f"the program does not start (Go's net.Listen: listen tcp: address {port}: invalid port)"
        )
        yield from in_range(
            f"{c.host}: {var}", port, *PORT_RANGE, f"a port must be from 1 to 65535: {says}",
            "declare a free port from 1 to 65535",
        )  # fmt: skip


FLEET_RULES: tuple[Rule, ...] = (
    Rule(
        "fleet.ports_free",
        1,
        (
            *PORT_KEYS,
            "mesh port",
            "sglang_frontend_port",
            "sglang_frontend_stats_port",
            "sglang_monitoring_prometheus_listen",
            "sglang_monitoring_alertmanager_listen",
            "sglang_monitoring_node_exporter_port",
        ),
        "a port is used by one listener of a host only: engines, bootstrap, routers and their metrics and mesh, the "
        "front and its stats, Prometheus, Alertmanager, node_exporter",
        "give each server on a host its own ports",
        _ports_free,
    ),
    Rule(
        "fleet.component_port_range",
        1,
        (
            "sglang_frontend_port",
            "sglang_frontend_stats_port",
            "sglang_monitoring_prometheus_listen",
            "sglang_monitoring_alertmanager_listen",
            "sglang_monitoring_node_exporter_port",
        ),
        "a port of the front, its stats, Prometheus, Alertmanager or node_exporter is from 1 to 65535",
        "declare a free port from 1 to 65535",
        _component_port_range,
    ),
    Rule(
        "fleet.gpus_free",
        1,
        ("gpu_ids",),
        "a GPU is used by one engine of a host only",
        "give each engine its own GPUs",
        _gpus_free,
    ),
)
