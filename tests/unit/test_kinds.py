"""Value kinds (plugins/module_utils/sglang_schema.py KINDS): each kind's declared check, argv parse and render,
environment round trip, live reading and equality, pinned value by value. The codec, the live reader, drift and the
simulator all go through these."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import BY_NAME, KINDS, truthy

RENDER = [
    ("str", "--x", "auto", ["--x", "auto"]),
    ("int", "--x", 64, ["--x", "64"]),
    ("size", "--x", 131072, ["--x", "131072"]),
    ("float", "--x", 0.83, ["--x", "0.83"]),
    ("float", "--x", 1, ["--x", "1.0"]),
    ("bool", "--x", True, ["--x"]),
    ("bool", "--x", False, []),
    ("intlist", "--x", [1, 2, 4], ["--x", "1", "2", "4"]),
]


@pytest.mark.parametrize(("kind", "flag", "value", "tokens"), RENDER)
def test_render_then_parse_gives_the_value_back(kind: str, flag: str, value: Any, tokens: list[str]) -> None:
    k = KINDS[kind]
    assert k.render(flag, value) == tokens
    if tokens:
        assert k.same(k.parse(tokens[1:]), value)


@pytest.mark.parametrize(
    ("kind", "tokens", "value"),
    [("size", ["128k"], 128000), ("size", ["1Mi"], 1048576), ("int", ["7"], 7), ("str", ["a b"], "a b"),
     ("float", ["0.5"], 0.5), ("intlist", ["3", "5"], [3, 5]), ("bool", [], True)],
)  # fmt: skip
def test_parse(kind: str, tokens: list[str], value: Any) -> None:
    assert KINDS[kind].parse(tokens) == value


@pytest.mark.parametrize(
    ("kind", "value", "coerced"),
    [("int", 64, 64), ("int", 64.0, 64), ("int", "64", 64), ("size", "128k", 128000), ("size", 5, 5),
     ("float", 1, 1.0), ("float", "0.83", 0.83), ("bool", True, True), ("intlist", (1, "2"), [1, 2]),
     ("str", 5, "5")],
)  # fmt: skip
def test_coerce_accepts(kind: str, value: Any, coerced: Any) -> None:
    got = KINDS[kind].coerce(value)
    assert (got, type(got)) == (coerced, type(coerced))


@pytest.mark.parametrize(
    ("kind", "value"),
    [("int", True), ("int", 1.5), ("int", "x"), ("size", "1.5Ki"), ("size", False), ("float", True),
     ("float", "fast"), ("bool", "yes"), ("bool", 1), ("intlist", 4), ("intlist", ["a"])],
)  # fmt: skip
def test_coerce_refuses(kind: str, value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        KINDS[kind].coerce(value)


@pytest.mark.parametrize(
    ("kind", "value", "env", "back"),
    [("bool", True, "1", True), ("bool", False, "0", False), ("str", "x", "x", "x"), ("int", 3, "3", "3")],
)
def test_environment_round_trip(kind: str, value: Any, env: str, back: Any) -> None:
    """A bool is 1/0; other kinds travel as their text (read back raw, compared by kind)."""
    k = KINDS[kind]
    assert k.to_env(value) == env
    assert k.from_env(env) == back
    assert k.same(k.from_env(env), value)


def test_an_unset_environment_switch_is_false() -> None:
    assert KINDS["bool"].from_env(None) is False
    assert KINDS["str"].from_env(None) is None


@pytest.mark.parametrize(
    ("kind", "value", "loose"),
    [("int", "64", 64), ("size", 12.0, 12), ("float", "0.8", 0.8), ("bool", 1, True), ("intlist", ["1"], [1]),
     ("str", 5, "5")],
)  # fmt: skip
def test_loose_reads_a_reported_value(kind: str, value: Any, loose: Any) -> None:
    assert KINDS[kind].loose(value) == loose


@pytest.mark.parametrize(
    ("kind", "a", "b", "same"),
    [
        ("bool", None, False, True), ("bool", "0", None, True), ("bool", "1", True, True),
        ("bool", "false", True, False), ("int", None, None, True), ("int", None, 0, False), ("int", "64", 64, True),
        ("size", 128000, "128000", True),
        ("float", 0.83, 0.8300000001, True), ("float", 0.83, 0.84, False), ("intlist", ["1", 2], [1, 2], True),
        ("intlist", [1], [1, 2], False), ("str", 5, "5", True), ("str", "a", None, False),
    ],
)  # fmt: skip
def test_same(kind: str, a: Any, b: Any, same: bool) -> None:
    assert KINDS[kind].same(a, b) is same


def test_every_key_has_a_kind_with_its_rules() -> None:
    assert {k.type.name for k in BY_NAME.values()} <= set(KINDS)
    assert BY_NAME["context_length"].type is KINDS["size"]
    assert BY_NAME["bf16_index_k"].type is KINDS["bool"]


@pytest.mark.parametrize(("value", "truth"), [(True, True), ("1", True), ("true", True), (None, False), ("0", False),
                                               ("false", False), ("False", False), (False, False)])  # fmt: skip
def test_truthy(value: Any, truth: bool) -> None:
    assert truthy(value) is truth
