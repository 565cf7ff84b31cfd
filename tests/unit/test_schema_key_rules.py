"""How an envelope key finds its flag and kind in the parsers' tables, the size refusals, and the hint."""

from __future__ import annotations

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import did_you_mean
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import ROLES, Key, parse_size


@pytest.mark.parametrize(
    ("name", "roles", "flag", "kind"),
    [
        ("context_length", ("decode",), "--context-length", "size"),
        ("context_length", ("prefill", "decode"), "--context-length", "size"),
        ("policy", ("router",), "--policy", "str"),
        ("max_concurrent_requests", ("router",), "--max-concurrent-requests", "int"),
        ("port", ROLES, "--port", "int"),
    ],
)
def test_a_key_takes_flag_and_kind_from_its_roles_tables(
    name: str, roles: tuple[str, ...], flag: str, kind: str
) -> None:
    key = Key(name, roles)
    assert (key.flag, key.kind) == (flag, kind)


@pytest.mark.parametrize(("name", "roles"), [("context_length", ("router",)), ("policy", ("decode",))])
def test_a_key_missing_from_its_roles_table_is_refused(name: str, roles: tuple[str, ...]) -> None:
    with pytest.raises(KeyError):
        Key(name, roles)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "1.5Ki",
            "Decimals are not allowed with IEC suffixes like 'Ki'. Use an integer IEC value such as '1Ki', "
            "or an SI value such as '1.5K'.",
        ),
        (
            "12x",
            "Invalid integer value: '12x'. Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive.",
        ),
    ],
)
def test_size_refusals_carry_sglangs_text(text: str, message: str) -> None:
    """The texts are SGLang's (tests/component/conformance/test_size_parsing.py runs its parser on the same inputs)."""
    with pytest.raises(ValueError) as error:
        parse_size(text)
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ("fp8_e4m4", " (did you mean fp8_e4m3?)"),
        ("fp8_e4m", " (did you mean fp8_e4m3?)"),
        ("zzz", ""),
    ],
)
def test_the_hint_names_the_closest_choice_or_nothing(value: str, hint: str) -> None:
    assert did_you_mean(value, ["auto", "fp8_e5m2", "fp8_e4m3", "bf16"]) == hint
