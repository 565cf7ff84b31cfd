"""Who can call the stack without a key: a router, or the HAProxy front of the routers, listening beyond loopback
while the routers hold no API key. smg 1.13.0 answers 401 to a call without `Authorization: Bearer <key>` only when
it runs with --api-key; without it, anyone who reaches the port is served, and the router passes its own key (none)
on to the engines. The front passes the header through, so the routers' key guards it too.

The deploy's validation (roles/sglang_validate: render.yml, site.yml) refuses such a door (rule
access.key_beyond_loopback) unless the host declares OPEN_ON_PURPOSE; then the door is a risk (open_without_key),
shown with the others and never an error. The capacity answers (sglang-envelope, check_fleet) do not need a key."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import default_of
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import GROUPS, router_envelope

from .sglang_fleet_rules import role_default
from .sglang_rules import Finding, Rule, run
from .sglang_sidedoors import is_loopback

OPEN_ON_PURPOSE = "sglang_open_without_key"
KEY = "sglang_api_key"
KEY_VARS = (KEY, "sglang_router_api_key")  # the router role's key defaults to sglang_api_key
FRONT_GROUP = "sglang_frontend"


@dataclass(frozen=True)
class Door:
    """A listener that serves calls without a key."""

    host: str
    what: str  # router | front
    variable: str  # the declared variable of its address
    address: str
    port: Any
    on_purpose: bool

    def text(self) -> str:
        return f"the {self.what} on {self.host} listens on {self.address}:{self.port} ({self.variable})"


def has_key(hostvars: Mapping[str, Any]) -> bool:
    return any(str(hostvars.get(name) or "").strip() for name in KEY_VARS)


def doors(hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> Iterator[Door]:
    """Every router and front listener beyond loopback that serves without a key."""
    routers = list(groups.get(GROUPS["router"], []))
    for host in routers:
        hv = hostvars.get(host, {})
        env = router_envelope(hv)
        address = env.get("host") or default_of("router", "host")
        if not has_key(hv) and not is_loopback(str(address)):
            port = env.get("port") or default_of("router", "port")
            yield Door(host, "router", "sglang_router.host", str(address), port, bool(hv.get(OPEN_ON_PURPOSE)))
    if not any(not has_key(hostvars.get(h, {})) for h in routers):
        return
    for host in groups.get(FRONT_GROUP, []):
        hv = hostvars.get(host, {})
        address = hv.get("sglang_frontend_bind_address") or role_default(FRONT_GROUP, "sglang_frontend_bind_address")
        if not is_loopback(str(address)):
            port = hv.get("sglang_frontend_port") or role_default(FRONT_GROUP, "sglang_frontend_port")
            yield Door(host, "front", "sglang_frontend_bind_address", str(address), port,
                       bool(hv.get(OPEN_ON_PURPOSE)))  # fmt: skip


def _key_beyond_loopback(c: Any) -> Iterator[Finding]:
    for door in doors(c.hostvars, c.groups):
        if not door.on_purpose:
            yield Finding(
                f"{door.host}: {KEY}",
                "",
                f"{door.text()}, and without a key smg serves every caller that reaches it (smg runs without "
                "--api-key)",
                f"declare {KEY} in the inventory's vault file (group_vars/all/vault.yml, encrypted with "
                f"ansible-vault), or listen on 127.0.0.1, or declare {OPEN_ON_PURPOSE}: true on {door.host} to serve "
                "without a key on purpose (shown as a risk)",
            )


ACCESS_RULES: tuple[Rule, ...] = (
    Rule(
        "access.key_beyond_loopback",
        1,
        (KEY, "sglang_router.host", "sglang_frontend_bind_address", OPEN_ON_PURPOSE),
        "a router or front that listens beyond loopback has an API key",
        f"declare {KEY}, listen on loopback, or declare {OPEN_ON_PURPOSE}: true",
        _key_beyond_loopback,
    ),
)


def open_door_risks(hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> list[dict]:
    """The doors declared open on purpose, as risks (sglang_risks.Finding's fields)."""
    return [
        {
            "id": "open_without_key",
            "severity": "warn",
            "summary": f"{door.text()} and serves every caller without a key: {OPEN_ON_PURPOSE} is true",
            "numbers": {"address": door.address, "port": door.port},
            "servers": [f"{door.host}:{door.what}"],
            "fixes": [],
        }
        for door in doors(hostvars, groups)
        if door.on_purpose
    ]


def access_problems(hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The refusals of ACCESS_RULES, as validation writes them."""
    return run(ACCESS_RULES, _Doors(hostvars, groups))


@dataclass(frozen=True)
class _Doors:
    hostvars: Mapping[str, Mapping[str, Any]]
    groups: Mapping[str, Sequence[str]]
