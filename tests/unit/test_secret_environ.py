"""The API key's environment variable has one name (sglang_flags.API_KEY_VAR): the roles write it through the
sglang_secret_environ filter, the readers (the layers, the audit, verify, the bench) read it by that constant, and no
task file or template spells it."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.filter.sglang import FilterModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import (
    API_KEY_VAR,
    REDACTED,
    api_key_in,
    secret_environ,
)

ROLES = Path(__file__).resolve().parents[2] / "collections/ansible_collections/sglang/dsv4/roles"


def test_a_declared_key_is_written_under_its_variable_and_read_back() -> None:
    written = secret_environ("sk-one-name")
    assert written == {"SGLANG_API_KEY": "sk-one-name"}
    assert api_key_in("\n".join(f"{name}={value}" for name, value in written.items())) == "sk-one-name"


def test_no_key_writes_no_variable_and_a_preview_shows_the_marker() -> None:
    assert secret_environ("") == {} and secret_environ("", redacted=True) == {}
    assert secret_environ("sk-one-name", redacted=True) == {API_KEY_VAR: REDACTED}


def test_the_filter_is_the_owner_s_function() -> None:
    environ = FilterModule().filters()["sglang_secret_environ"]
    assert environ("sk-one-name") == secret_environ("sk-one-name")
    assert environ(None) == {} and environ("sk-one-name", redacted=True) == {API_KEY_VAR: REDACTED}


def test_no_task_file_or_template_spells_the_variable() -> None:
    files = [*ROLES.glob("*/tasks/*.yml"), *ROLES.glob("*/templates/*.j2")]
    assert len(files) > 20
    spelt = sorted(str(path.relative_to(ROLES)) for path in files if API_KEY_VAR in path.read_text())
    assert spelt == [], f"{API_KEY_VAR} spelt in {spelt}: write it through sglang.dsv4.sglang_secret_environ"
