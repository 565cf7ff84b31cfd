"""The filter plugin's own helpers (the envelope logic itself is module_utils', tested in tests/unit)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from deploytools import REPO
from sglang_envelope.sglang_flags import parse_env_file


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglang_filters", REPO / "plugins/filter/sglang.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


F = _plugin()


def test_every_filter_is_registered() -> None:
    names = F.FilterModule().filters()
    assert {"sglang_check_fleet", "sglang_render_args", "sglang_environ", "sglang_workers"} <= set(names)
    assert all(name.startswith("sglang_") for name in names)


def test_release_digest_follows_the_inputs(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "pyproject.toml").write_text("[project]\n")
    first = F.source_digest(str(tmp_path), ["pyproject.toml", "pkg"])
    (tmp_path / "pkg" / "__pycache__").mkdir()
    (tmp_path / "pkg" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    assert F.source_digest(str(tmp_path), ["pyproject.toml", "pkg"]) == first
    assert F.source_digest(str(tmp_path), ["pyproject.toml", "pkg"], salt="extras") != first
    (tmp_path / "pkg" / "a.py").write_text("x = 2\n")
    assert F.source_digest(str(tmp_path), ["pyproject.toml", "pkg"]) != first
    with pytest.raises(ValueError, match="does not exist"):
        F.source_digest(str(tmp_path), ["missing"])


@pytest.mark.parametrize(
    ("value", "line"),
    [("1", "K=1"), ("141", "K=141"), ("a b", 'K="a b"'), ('q"$x', 'K="q\\"\\$x"'), ("<redacted>", 'K="<redacted>"')],
)
def test_env_values_are_quoted_for_systemd(value: str, line: str) -> None:
    assert f"K={F.env_quote(value)}" == line


def test_simple_env_values_read_back_with_the_codec() -> None:
    assert parse_env_file(f"K={F.env_quote('a b')}\n") == {"K": "a b"}


def test_router_worker_lines() -> None:
    workers = {
        "prefill": [{"host": "p", "url": "http://p:30000", "bootstrap_port": 8998}],
        "decode": [{"host": "d", "url": "http://d:30001"}],
    }
    assert F.router_worker_args(workers) == ["--prefill http://p:30000 8998", "--decode http://d:30001"]


def test_unit_values() -> None:
    assert (F.unit_value(True), F.unit_value(False), F.unit_value(1800)) == ("yes", "no", "1800")


def test_secrets_never_enter_the_envelope() -> None:
    hostvars = {"sglang_router": {"port": 8000}, "sglang_api_key": "s3cret"}
    envelope = F.router_envelope(hostvars, api_key="s3cret")
    assert "s3cret" not in repr(envelope)
    assert '--api-key "${SGLANG_API_KEY}"' in F.render_args(envelope, "router")
    assert "api_key" not in F.public_envelope(envelope, "router")
