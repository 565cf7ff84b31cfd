"""The rules between the servers of one host (scope `fleet`): each server its own ports, each engine its own GPUs.
A server is checked against the ports and GPUs the servers before it on the host claimed."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .sglang_rules import PORT_RANGE, Finding, Rule

PORT_KEYS = ("port", "disaggregation_bootstrap_port", "prometheus_port")


@dataclass(frozen=True)
class ServerContext:
    """One server's envelope on its host, with the ports and GPUs claimed before it there (number -> claimant)."""

    host: str
    role: str
    env: Mapping[str, Any]
    ports_before: Mapping[int, str]
    gpus_before: Mapping[int, str]

    @property
    def ports(self) -> list[tuple[str, int]]:
        """(variable, port) of each declared port in 1..65535, in declaration order (others have their own rule)."""
        declared = ((f"sglang_{self.role}.{n}", self.env.get(n)) for n in PORT_KEYS)
        return [(v, p) for v, p in declared if isinstance(p, int) and PORT_RANGE[0] <= p <= PORT_RANGE[1]]

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
                f"{c.host}: sglang_{c.role}.gpu_ids",
                c.env["gpu_ids"],
                f"GPU {gpu} is already used by {claimed[int(gpu)]}",
                "give each engine its own GPUs",
            )
        claimed[int(gpu)] = f"sglang_{c.role}"


FLEET_RULES: tuple[Rule, ...] = (
    Rule(
        "fleet.ports_free",
        1,
        PORT_KEYS,
        "a port is used by one server of a host only",
        "give each server on a host its own ports",
        _ports_free,
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
