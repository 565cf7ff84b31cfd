"""The declared fleet (plugins/module_utils/sglang_declared.py): each engine's envelope from its host variables, where a
key is declared, the address a local process dials, and the worker URLs the router registers, per role."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    declared_in,
    declared_var,
    engine_envelope,
    engine_url,
    local_address,
    local_url,
    router_argv_workers,
    router_envelope,
    router_worker_specs,
    workers,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError
from shipped import shipped_inventory

REPO = Path(__file__).resolve().parents[2]
MODEL = {"name": "deepseek-v4-flash", "path": "/models/V4", "served_name": "dsv4"}


def host(
    common: dict[str, Any] | None = None,
    prefill: dict[str, Any] | None = None,
    decode: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Synthetic hostvars of one host: shared engine keys, per-role dicts and the model."""
    hv: dict[str, Any] = {"sglang_model": MODEL, **extra}
    if common is not None:
        hv["sglang_engine_common"] = common
    if prefill is not None:
        hv["sglang_prefill"] = prefill
    if decode is not None:
        hv["sglang_decode"] = decode
    return hv


# --- engine_envelope ---------------------------------------------------------------------------------------------


def test_prefill_envelope_merges_common_then_role_then_derived_keys() -> None:
    """The role's dict overrides the shared one; model path/name, the PD mode and the first GPU are derived;
    `enabled` is a deploy switch, not an engine key."""
    hv = host(
        common={"host": "0.0.0.0", "port": 1, "context_length": "128k", "tp_size": 4},
        prefill={"port": 30000, "gpu_ids": [6, 4, 5], "enabled": True, "disaggregation_bootstrap_port": 9001},
    )
    assert engine_envelope("prefill", hv) == {
        "host": "0.0.0.0",
        "port": 30000,
        "context_length": 128000,
        "tp_size": 4,
        "gpu_ids": [6, 4, 5],
        "disaggregation_bootstrap_port": 9001,
        "model_path": "/models/V4",
        "served_model_name": "dsv4",
        "disaggregation_mode": "prefill",
        "base_gpu_id": 4,
    }


def test_decode_envelope_keeps_declared_model_and_base_gpu() -> None:
    """Declared model_path, served_model_name and base_gpu_id win over the derived ones; enabled=False is dropped."""
    hv = host(
        decode={
            "port": 30001,
            "gpu_ids": [4, 5],
            "base_gpu_id": 5,
            "model_path": "/m",
            "served_model_name": "n",
            "enabled": False,
        },
    )
    assert engine_envelope("decode", hv) == {
        "port": 30001,
        "gpu_ids": [4, 5],
        "base_gpu_id": 5,
        "model_path": "/m",
        "served_model_name": "n",
        "disaggregation_mode": "decode",
    }


def test_envelope_without_any_declared_dict() -> None:
    """A host with no engine dicts and no model still gets the PD mode (model path/name unset, no base GPU)."""
    assert engine_envelope("decode", {}) == {
        "model_path": None,
        "served_model_name": None,
        "disaggregation_mode": "decode",
    }


def test_empty_gpu_ids_derive_no_base_gpu() -> None:
    """An empty GPU list derives no base_gpu_id."""
    env = engine_envelope("prefill", host(prefill={"gpu_ids": []}))
    assert "base_gpu_id" not in env and env["gpu_ids"] == []


@pytest.mark.parametrize(
    ("role", "message"),
    [
        ("router", "role='router' is not an engine role (prefill, decode)"),
        ("Prefill", "role='Prefill' is not an engine role (prefill, decode)"),
    ],
)
def test_non_engine_role_is_refused(role: str, message: str) -> None:
    """Only prefill and decode have engine envelopes; the error names the role and the valid ones."""
    with pytest.raises(EnvelopeError) as err:
        engine_envelope(role, host())
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("hv", "where"),
    [
        (host(common={"bogus": 1}), "sglang_engine_common.bogus=1: not a known prefill envelope key"),
        (host(prefill={"bogus": 1}), "sglang_prefill.bogus=1: not a known prefill envelope key"),
        (host(common={"port": "x"}), "sglang_engine_common.port='x' is not a valid int"),
        (host(prefill={"port": "x"}), "sglang_prefill.port='x' is not a valid int"),
    ],
    ids=["common-unknown", "role-unknown", "common-type", "role-type"],
)
def test_envelope_errors_name_the_declaring_variable(hv: dict[str, Any], where: str) -> None:
    """A bad key or value is reported against the dict that declares it."""
    with pytest.raises(EnvelopeError) as err:
        engine_envelope("prefill", hv)
    assert str(err.value).startswith(where)


def test_decode_refuses_a_bootstrap_port() -> None:
    """The bootstrap port is a prefill key: declared for decode it is an error, not silently dropped."""
    with pytest.raises(EnvelopeError) as err:
        engine_envelope("decode", host(common={"disaggregation_bootstrap_port": 8998}))
    assert str(err.value).startswith("sglang_engine_common.disaggregation_bootstrap_port=8998: not a known decode")


# --- declared_in / declared_var ----------------------------------------------------------------------------------

BOTH = host(common={"port": 1, "context_length": 2, "gpu_ids": [0]}, decode={"port": 3, "model_path": "/x"})


@pytest.mark.parametrize(
    ("hv", "key", "expected"),
    [
        (BOTH, "port", "sglang_decode"),
        (BOTH, "model_path", "sglang_decode"),
        (BOTH, "context_length", "sglang_engine_common"),
        (BOTH, "page_size", "sglang_decode"),
        ({}, "port", "sglang_decode"),
        (host(common={"port": 1}), "port", "sglang_engine_common"),
    ],
    ids=["both", "own-only", "common-only", "neither", "no-dicts", "no-own-dict"],
)
def test_declared_in(hv: dict[str, Any], key: str, expected: str) -> None:
    """A key belongs to the role's dict when declared there or nowhere, else to the shared dict."""
    assert declared_in("decode", hv, key) == expected


@pytest.mark.parametrize(
    ("role", "hv", "key", "expected"),
    [
        ("decode", BOTH, "port", "sglang_decode.port"),
        ("decode", BOTH, "context_length", "sglang_engine_common.context_length"),
        ("decode", BOTH, "model_path", "sglang_decode.model_path"),
        ("decode", BOTH, "served_model_name", "sglang_model.served_name"),
        ("prefill", {}, "model_path", "sglang_model.path"),
        ("decode", BOTH, "base_gpu_id", "sglang_engine_common.gpu_ids"),
        ("prefill", host(prefill={"gpu_ids": [1]}), "base_gpu_id", "sglang_prefill.gpu_ids"),
        ("prefill", {}, "base_gpu_id", "sglang_prefill.gpu_ids"),
        ("decode", BOTH, "disaggregation_mode", "the inventory group sglang_decode"),
        ("prefill", {}, "disaggregation_mode", "the inventory group sglang_prefill"),
        ("router", {}, "disaggregation_mode", "the inventory group sglang_router"),
        ("other", {}, "disaggregation_mode", "the inventory group other"),
        ("decode", BOTH, "api_key", "sglang_api_key"),
        ("decode", BOTH, "page_size", "sglang_decode.page_size"),
        ("prefill", {}, "tp_size", "sglang_prefill.tp_size"),
    ],
)
def test_declared_var(role: str, hv: dict[str, Any], key: str, expected: str) -> None:
    """Messages name the declared variable behind a key, or the variable it is derived from."""
    assert declared_var(role, hv, key) == expected


# --- router_envelope ---------------------------------------------------------------------------------------------


def test_router_envelope_is_normalized() -> None:
    """The router dict is type-checked and coerced; a missing one is empty."""
    assert router_envelope({"sglang_router": {"port": "8000", "host": "::", "queue_size": 4.0}}) == {
        "port": 8000,
        "host": "::",
        "queue_size": 4,
    }
    assert router_envelope({}) == {}
    assert router_envelope({"sglang_router": None}) == {}


def test_router_envelope_errors_name_sglang_router() -> None:
    """An engine key in the router dict is an error naming sglang_router."""
    with pytest.raises(EnvelopeError) as err:
        router_envelope({"sglang_router": {"tp_size": 4}})
    assert str(err.value).startswith("sglang_router.tp_size=4: not a known router envelope key")


# --- local_address / engine_url ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "expected"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("::", "127.0.0.1"),
        ("", "127.0.0.1"),
        (None, "127.0.0.1"),
        ("127.0.0.1", "127.0.0.1"),
        ("10.1.2.3", "10.1.2.3"),
        ("::1", "::1"),
        ("fd00::5", "fd00::5"),
        ("gpu-node-01", "gpu-node-01"),
        ("0.0.0.1", "0.0.0.1"),
    ],
)
def test_local_address(listen: Any, expected: str) -> None:
    """A wildcard bind (or none) is dialled on loopback; an explicit address as declared."""
    assert local_address(listen) == expected


@pytest.mark.parametrize(
    ("hv", "expected"),
    [
        ({"sglang_advertise_host": "10.0.0.9", "ansible_host": "192.0.2.1"}, "http://10.0.0.9:30001"),
        ({"ansible_host": "192.0.2.1"}, "http://192.0.2.1:30001"),
        ({"sglang_advertise_host": "", "ansible_host": "192.0.2.1"}, "http://192.0.2.1:30001"),
        ({"sglang_advertise_host": None, "ansible_host": None}, "http://dec-1:30001"),
        ({}, "http://dec-1:30001"),
    ],
    ids=["advertise", "ansible-host", "empty-advertise", "nulls", "inventory-name"],
)
def test_engine_url(hv: dict[str, Any], expected: str) -> None:
    """The router reaches an engine at sglang_advertise_host, else ansible_host, else the inventory name."""
    assert engine_url("dec-1", hv, {"port": 30001}) == expected


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("fd00::5", "http://[fd00::5]:30001"),
        ("[fd00::5]", "http://[fd00::5]:30001"),
        ("10.0.0.5", "http://10.0.0.5:30001"),
    ],
)
def test_engine_url_brackets_ipv6(address: str, url: str) -> None:
    """http://fd00::5:30001 is not a URL with a port; RFC 3986 needs http://[fd00::5]:30001."""
    assert engine_url("dec-1", {"sglang_advertise_host": address}, {"port": 30001}) == url


@pytest.mark.parametrize(
    ("listen", "url"),
    [(None, "http://127.0.0.1:8000"), ("::", "http://127.0.0.1:8000"), ("::1", "http://[::1]:8000"),
     ("10.0.0.5", "http://10.0.0.5:8000")],
)  # fmt: skip
def test_local_url_of_a_server(listen: str | None, url: str) -> None:
    assert local_url(listen, 8000) == url


# --- workers and the router's registrations ------------------------------------------------------------------------

# Synthetic fleet: two prefill hosts (one with its own bootstrap port), two decode hosts, a router host.
FLEET: dict[str, dict[str, Any]] = {
    "p1": host(
        common={"host": "0.0.0.0"},
        prefill={"port": 30000, "disaggregation_bootstrap_port": 9100},
        decode={"port": 30001},
        ansible_host="10.0.0.1",
    ),
    "p2": host(prefill={"port": 31000}, decode={"port": 31001}, sglang_advertise_host="10.9.0.2"),
    "d1": host(prefill={"port": 30000}, decode={"port": 30001}, ansible_host="10.0.0.3"),
    "d2": host(prefill={"port": 32000}, decode={"port": 32001}),
    "r1": {"sglang_router": {"port": 8000}},
}
GROUPS = {"sglang_prefill": ["p1", "p2"], "sglang_decode": ["d2", "d1"], "sglang_router": ["r1"]}
WORKERS = {
    "prefill": [
        {"host": "p1", "url": "http://10.0.0.1:30000", "bootstrap_port": 9100},
        {"host": "p2", "url": "http://10.9.0.2:31000", "bootstrap_port": 8998},
    ],
    "decode": [
        {"host": "d2", "url": "http://d2:32001"},
        {"host": "d1", "url": "http://10.0.0.3:30001"},
    ],
}


def test_workers_follow_the_groups_in_order() -> None:
    """Prefill entries carry the bootstrap port (8998 by default); decode entries only host and URL."""
    assert workers(FLEET, GROUPS) == WORKERS


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ({"sglang_decode": ["d1"]}, {"prefill": [], "decode": [{"host": "d1", "url": "http://10.0.0.3:30001"}]}),
        (
            {"sglang_prefill": ["p2"]},
            {"prefill": [{"host": "p2", "url": "http://10.9.0.2:31000", "bootstrap_port": 8998}], "decode": []},
        ),
        ({}, {"prefill": [], "decode": []}),
    ],
    ids=["decode-only", "prefill-only", "none"],
)
def test_workers_with_a_missing_group(groups: dict[str, list[str]], expected: dict[str, Any]) -> None:
    """A group absent from the inventory yields no workers of that role."""
    assert workers(FLEET, groups) == expected


def test_router_worker_specs() -> None:
    """smg's POST /workers bodies: prefill with its bootstrap port first, then decode."""
    assert router_worker_specs(WORKERS) == [
        {"url": "http://10.0.0.1:30000", "worker_type": "prefill", "bootstrap_port": 9100},
        {"url": "http://10.9.0.2:31000", "worker_type": "prefill", "bootstrap_port": 8998},
        {"url": "http://d2:32001", "worker_type": "decode"},
        {"url": "http://10.0.0.3:30001", "worker_type": "decode"},
    ]
    assert router_worker_specs({"prefill": [], "decode": []}) == []


def test_router_argv_workers() -> None:
    """smg's PD command line: `--prefill URL PORT` per prefill, `--decode URL` per decode, all strings."""
    assert router_argv_workers(WORKERS) == [
        "--prefill",
        "http://10.0.0.1:30000",
        "9100",
        "--prefill",
        "http://10.9.0.2:31000",
        "8998",
        "--decode",
        "http://d2:32001",
        "--decode",
        "http://10.0.0.3:30001",
    ]
    assert router_argv_workers({"prefill": [], "decode": []}) == []


# Real inventories, as ansible-inventory resolves them (values read from inventories/*/hosts.yml and group_vars).
def _shared(**extra: Any) -> dict[str, Any]:
    """The shared envelope of every inventory: prefill on port 30000, decode on 30001."""
    return host(
        common={"host": "0.0.0.0", "tp_size": 4},
        prefill={"disaggregation_bootstrap_port": 8998, "gpu_ids": [0, 1, 2, 3], "port": 30000},
        decode={"gpu_ids": [4, 5, 6, 7], "port": 30001},
        **extra,
    )


def test_multinode_shape_workers_and_argv() -> None:
    """Two prefill and three decode hosts without ansible_host: URLs use the inventory names."""
    names = ["prefill-01", "prefill-02", "decode-01", "decode-02", "decode-03"]
    fleet = {name: _shared() for name in names}
    groups = {"sglang_prefill": names[:2], "sglang_decode": names[2:]}
    assert router_argv_workers(workers(fleet, groups)) == [
        "--prefill",
        "http://prefill-01:30000",
        "8998",
        "--prefill",
        "http://prefill-02:30000",
        "8998",
        "--decode",
        "http://decode-01:30001",
        "--decode",
        "http://decode-02:30001",
        "--decode",
        "http://decode-03:30001",
    ]


def test_single_host_shape_advertises_loopback() -> None:
    """One host running both engines (production, lab) with sglang_advertise_host 127.0.0.1."""
    fleet = {"gpu-node-01": _shared(sglang_advertise_host="127.0.0.1")}
    groups = {"sglang_prefill": ["gpu-node-01"], "sglang_decode": ["gpu-node-01"]}
    assert router_worker_specs(workers(fleet, groups)) == [
        {"url": "http://127.0.0.1:30000", "worker_type": "prefill", "bootstrap_port": 8998},
        {"url": "http://127.0.0.1:30001", "worker_type": "decode"},
    ]
    assert engine_envelope("prefill", fleet["gpu-node-01"])["base_gpu_id"] == 0
    assert engine_envelope("decode", fleet["gpu-node-01"])["base_gpu_id"] == 4


@pytest.mark.parametrize(
    ("inventory", "argv"),
    [
        ("lab", ["--prefill", "http://127.0.0.1:30000", "8998", "--decode", "http://127.0.0.1:30001"]),
        ("production", ["--prefill", "http://127.0.0.1:30000", "8998", "--decode", "http://127.0.0.1:30001"]),
        (
            "multinode",
            [
                *("--prefill", "http://prefill-01:30000", "8998", "--prefill", "http://prefill-02:30000", "8998"),
                *("--decode", "http://decode-01:30001", "--decode", "http://decode-02:30001"),
                *("--decode", "http://decode-03:30001"),
            ],
        ),
    ],
)
def test_real_inventory_router_argv(inventory: str, argv: list[str]) -> None:
    """The router's worker arguments for each shipped inventory, as ansible-inventory resolves it."""
    hostvars, groups = shipped_inventory(inventory)
    assert router_argv_workers(workers(hostvars, groups)) == argv
