"""Who can call the stack without a key (plugin_utils sglang_access): the exact refusal of a router or front beyond
loopback without sglang_api_key, the open-on-purpose risk instead, and what passes. smg's own answer (401 without
the key only when it runs with --api-key) is shown against the real router in tests/component/sim."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_access import access_problems, open_door_risks
from shipped import shipped_inventory

ONE = {"sglang_prefill": ["h"], "sglang_decode": ["h"], "sglang_router": ["h"]}
FRONT = {**ONE, "sglang_frontend": ["f"]}
FIX = (
    "declare sglang_api_key in the inventory's vault file (group_vars/all/vault.yml, encrypted with ansible-vault), "
    "or listen on 127.0.0.1, or declare sglang_open_without_key: true on {host} to serve without a key on purpose "
    "(shown as a risk)"
)


def _router(**router: Any) -> dict[str, Any]:
    return {"sglang_router": {"port": 8000, **router}}


# (id, hosts, groups, the rule ids broken, the declared variable named): the case table test_rule_ids reads.
ACCESS: list[tuple[str, dict[str, Any], dict[str, list[str]], set[str], str]] = [
    ("router-on-every-address", {"h": _router(host="0.0.0.0")}, ONE, {"access.key_beyond_loopback"},
     "h: sglang_api_key="),
    ("front-before-keyless-routers", {"h": _router(host="127.0.0.1"), "f": {}}, FRONT,
     {"access.key_beyond_loopback"}, "f: sglang_api_key="),
]  # fmt: skip


@pytest.mark.parametrize(("hosts", "groups", "rules", "var"), [c[1:] for c in ACCESS], ids=[c[0] for c in ACCESS])
def test_each_case_breaks_its_rule_naming_the_variable(
    hosts: dict[str, Any], groups: dict[str, list[str]], rules: set[str], var: str
) -> None:
    problems = access_problems(hosts, groups)
    assert {p.split(" [", 1)[1].split("]", 1)[0] for p in problems} == rules
    assert all(p.startswith(var) for p in problems), problems


def test_a_router_on_every_address_without_a_key_is_refused() -> None:
    assert access_problems({"h": _router(host="0.0.0.0")}, ONE) == [
        "h: sglang_api_key='': the router on h listens on 0.0.0.0:8000 (sglang_router.host), and without a key smg "
        "serves every caller that reaches it (smg runs without --api-key) [access.key_beyond_loopback]; fix: "
        + FIX.format(host="h")
    ]


def test_smg_s_own_default_address_is_every_address() -> None:
    """No host declared: smg binds 0.0.0.0 (its parser's default, read from smg's own table)."""
    (problem,) = access_problems({"h": _router()}, ONE)
    assert "listens on 0.0.0.0:8000" in problem


def test_a_front_beyond_loopback_before_keyless_routers_is_refused() -> None:
    hosts = {"h": _router(host="127.0.0.1"), "f": {"sglang_frontend_port": 8080}}
    assert [p.split(" [", 1)[0] for p in access_problems(hosts, FRONT)] == [
        "f: sglang_api_key='': the front on f listens on *:8080 (sglang_frontend_bind_address), and without a key smg "
        "serves every caller that reaches it (smg runs without --api-key)"
    ]


@pytest.mark.parametrize(
    "hosts",
    [
        {"h": {**_router(host="0.0.0.0"), "sglang_api_key": "k"}},
        {"h": {**_router(host="0.0.0.0"), "sglang_router_api_key": "k"}},
        {"h": _router(host="127.0.0.1")},
        {"h": _router(host="::1")},
        {"h": _router(host="localhost")},
    ],
    ids=["key", "router-key", "loopback", "loopback-v6", "localhost"],
)
def test_a_key_or_loopback_passes(hosts: dict[str, Any]) -> None:
    assert access_problems(hosts, ONE) == []


def test_a_front_before_routers_with_a_key_passes() -> None:
    hosts = {"h": {**_router(host="0.0.0.0"), "sglang_api_key": "k"}, "f": {"sglang_api_key": "k"}}
    assert access_problems(hosts, FRONT) == []


def test_open_on_purpose_is_a_risk_not_a_refusal() -> None:
    hosts = {"h": {**_router(host="0.0.0.0"), "sglang_open_without_key": True}}
    assert access_problems(hosts, ONE) == []
    assert open_door_risks(hosts, ONE) == [{
        "id": "open_without_key", "severity": "warn",
        "summary": "the router on h listens on 0.0.0.0:8000 (sglang_router.host) and serves every caller without a "
                   "key: sglang_open_without_key is true",
        "numbers": {"address": "0.0.0.0", "port": 8000}, "servers": ["h:router"], "fixes": [],
    }]  # fmt: skip


@pytest.mark.parametrize("name", ["production", "multinode"])
def test_a_shipped_inventory_without_its_vault_file_is_refused_naming_the_key(name: str) -> None:
    hostvars, groups = shipped_inventory(name)
    (router,) = groups["sglang_router"]
    assert access_problems(hostvars, groups) == [
        f"{router}: sglang_api_key='': the router on {router} listens on 0.0.0.0:8000 (sglang_router.host), and "
        "without a key smg serves every caller that reaches it (smg runs without --api-key) "
        f"[access.key_beyond_loopback]; fix: {FIX.format(host=router)}"
    ]
    hostvars[router]["sglang_api_key"] = "from-the-vault"
    assert access_problems(hostvars, groups) == []


def test_the_lab_keeps_its_test_key() -> None:
    assert access_problems(*shipped_inventory("lab")) == []
