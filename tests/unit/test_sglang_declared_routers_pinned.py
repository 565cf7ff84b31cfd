"""The routers of the inventory (plugins/module_utils/sglang_declared.py): the address other hosts reach a host at,
each router's local URL, address and port (the front's servers), and smg's mesh flags of a router among several."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import advertised, router_mesh, routers
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError

# smg's defaults: --port 30000, --mesh-port 39527.
HOSTVARS: dict[str, dict[str, Any]] = {
    "r1": {"ansible_host": "10.0.0.11", "sglang_router": {"port": 8000, "host": "10.0.0.11"}},
    "r2": {"sglang_advertise_host": "r2.lab", "ansible_host": "10.0.0.12"},
    "r3": {"sglang_router": {"port": "8100", "host": "::"}},
    "r4": {"sglang_router": {"host": "fd00::4"}, "sglang_advertise_host": "fd00::4"},
}
# The same hosts with smg's mesh asked for (sglang_router_mesh; an extra var arrives as the string "true").
MESHED: dict[str, dict[str, Any]] = {
    name: {**hostvars, "sglang_router_mesh": True if name != "r3" else "true"} for name, hostvars in HOSTVARS.items()
}


# --- advertised ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hostvars", "expected"),
    [
        ({"sglang_advertise_host": "a.lab", "ansible_host": "10.0.0.1"}, "a.lab"),
        ({"sglang_advertise_host": "", "ansible_host": "10.0.0.1"}, "10.0.0.1"),
        ({"sglang_advertise_host": None, "ansible_host": None}, "h1"),
        ({}, "h1"),
        ({"ansible_host": 167772161}, "167772161"),
    ],
)
def test_advertised_prefers_the_advertise_host_then_ansible_host_then_the_name(
    hostvars: dict[str, Any], expected: str
) -> None:
    assert advertised("h1", hostvars) == expected


# --- routers -------------------------------------------------------------------------------------------------------


def test_routers_lists_each_router_of_the_group_in_order() -> None:
    groups = {"sglang_router": ["r3", "r1", "r2", "r4"], "sglang_prefill": ["p1"]}
    assert routers(HOSTVARS, groups) == [
        {"host": "r3", "local_url": "http://127.0.0.1:8100", "address": "r3", "port": 8100},
        {"host": "r1", "local_url": "http://10.0.0.11:8000", "address": "10.0.0.11", "port": 8000},
        {"host": "r2", "local_url": "http://127.0.0.1:30000", "address": "r2.lab", "port": 30000},
        {"host": "r4", "local_url": "http://[fd00::4]:30000", "address": "fd00::4", "port": 30000},
    ]


def test_routers_port_is_an_int() -> None:
    (found,) = routers(HOSTVARS, {"sglang_router": ["r3"]})
    assert type(found["port"]) is int


@pytest.mark.parametrize("groups", [{}, {"sglang_router": []}, {"sglang_prefill": ["r1"], "sglang_decode": ["r2"]}])
def test_no_router_group_means_no_router(groups: dict[str, list[str]]) -> None:
    assert routers(HOSTVARS, groups) == []


def test_routers_refuse_a_bad_router_envelope() -> None:
    with pytest.raises(EnvelopeError) as err:
        routers({"r1": {"sglang_router": {"tp_size": 4}}}, {"sglang_router": ["r1"]})
    assert str(err.value).startswith("sglang_router.tp_size=4: not a known router envelope key")


# --- router_mesh ---------------------------------------------------------------------------------------------------


def test_each_router_of_several_names_itself_and_lists_the_others_as_peers() -> None:
    groups = {"sglang_router": ["r1", "r2", "r3"]}
    assert router_mesh(MESHED, groups, "r2") == {
        "enable_mesh": True,
        "mesh_server_name": "r2",
        "mesh_advertise_host": "r2.lab",
        "mesh_port": 39527,
        "mesh_peer_urls": ["10.0.0.11:39527", "r3:39527"],
    }
    assert router_mesh(MESHED, groups, "r1") == {
        "enable_mesh": True,
        "mesh_server_name": "r1",
        "mesh_advertise_host": "10.0.0.11",
        "mesh_port": 39527,
        "mesh_peer_urls": ["r2.lab:39527", "r3:39527"],
    }


def test_two_routers_are_a_mesh() -> None:
    groups = {"sglang_router": ["r3", "r1"]}
    assert router_mesh(MESHED, groups, "r3") == {
        "enable_mesh": True,
        "mesh_server_name": "r3",
        "mesh_advertise_host": "r3",
        "mesh_port": 39527,
        "mesh_peer_urls": ["10.0.0.11:39527"],
    }
    assert type(router_mesh(MESHED, groups, "r3")["mesh_port"]) is int


@pytest.mark.parametrize(
    ("groups", "host"),
    [
        ({"sglang_router": ["r1"]}, "r1"),
        ({"sglang_router": []}, "r1"),
        ({}, "r1"),
        ({"sglang_router": ["r1", "r2"]}, "r3"),
        ({"sglang_prefill": ["r1", "r2"]}, "r1"),
    ],
)
def test_a_single_router_or_a_host_outside_the_group_has_no_mesh(groups: dict[str, list[str]], host: str) -> None:
    assert router_mesh(MESHED, groups, host) == {}


@pytest.mark.parametrize("asked", [None, False, "false", "no", ""])
def test_several_routers_form_no_mesh_unless_it_is_asked_for(asked: object) -> None:
    hostvars = {name: {**h, **({} if asked is None else {"sglang_router_mesh": asked})} for name, h in HOSTVARS.items()}
    assert router_mesh(hostvars, {"sglang_router": ["r1", "r2", "r3"]}, "r2") == {}


def test_a_router_that_does_not_ask_is_outside_the_mesh_and_no_peer_of_it() -> None:
    hostvars = {**MESHED, "r2": HOSTVARS["r2"]}
    groups = {"sglang_router": ["r1", "r2", "r3"]}
    assert router_mesh(hostvars, groups, "r1")["mesh_peer_urls"] == ["r3:39527"]
    assert router_mesh(hostvars, groups, "r3")["mesh_peer_urls"] == ["10.0.0.11:39527"]
    assert router_mesh(hostvars, groups, "r2") == {}
    assert router_mesh({**hostvars, "r3": HOSTVARS["r3"]}, groups, "r1") == {}  # one router asking is no mesh


def test_a_mesh_switch_that_is_no_boolean_is_refused_naming_it() -> None:
    hostvars = {**HOSTVARS, "r2": {**HOSTVARS["r2"], "sglang_router_mesh": "sometimes"}}
    with pytest.raises(EnvelopeError) as err:
        router_mesh(hostvars, {"sglang_router": ["r1", "r2"]}, "r2")
    assert str(err.value) == "sglang_router_mesh='sometimes': not a boolean; set it to true (smg's mesh) or false"


MESH_KEYS = ["enable_mesh", "mesh_server_name", "mesh_advertise_host", "mesh_port", "mesh_peer_urls"]


@pytest.mark.parametrize("key", MESH_KEYS)
def test_a_declared_mesh_key_is_refused_naming_it(key: str) -> None:
    """The mesh keys are schema keys (the codec renders them) that only the inventory sets: declared, refused."""
    with pytest.raises(EnvelopeError) as caught:
        routers({"r1": {"sglang_router": {key: 1}}}, {"sglang_router": ["r1"]})
    assert str(caught.value).startswith(f"sglang_router.{key}=1: the deployment derives {key} from ")
    assert str(caught.value).endswith(f"; fix: remove sglang_router.{key}")


def test_the_mesh_keys_render_as_smg_flags() -> None:
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import from_argv, to_argv

    mesh = router_mesh(MESHED, {"sglang_router": ["r1", "r2", "r4"]}, "r1")
    argv = to_argv("router", mesh)
    assert argv == [
        "--enable-mesh", "--mesh-server-name", "r1", "--mesh-advertise-host", "10.0.0.11", "--mesh-port", "39527",
        "--mesh-peer-urls", "r2.lab:39527", "[fd00::4]:39527",
    ]  # fmt: skip
    assert from_argv("router", argv) == mesh
