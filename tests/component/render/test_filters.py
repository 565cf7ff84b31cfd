"""The filter plugin's own helpers (the envelope logic itself is module_utils' and plugin_utils', tested in
tests/unit)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import parse_env_file
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, release_leftovers
from deploytools import REPO


def _plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "sglang_filters", REPO / "collections/ansible_collections/sglang/dsv4/plugins/filter/sglang.py"
    )
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


def test_release_pruning_from_find_agrees_with_the_audit(tmp_path: Path) -> None:
    """The release manager's prune (ansible.builtin.find's answer through the filter) removes exactly what the
    audit reports as leftovers (read from the file system): one rule, two adaptors."""
    releases = tmp_path / "opt/sglang/releases"
    for age, (name, complete) in enumerate([("r1", True), ("r2", False), ("r3", True), ("r4", True), ("r5", True)]):
        (releases / name / "venv").mkdir(parents=True)
        if complete:
            (releases / name / "manifest.json").write_text("{}")
        os.utime(releases / name, (1_000_000 + age, 1_000_000 + age))
    (tmp_path / "opt/sglang/current").symlink_to(releases / "r5")
    (tmp_path / "opt/sglang/previous").symlink_to(releases / "r1")
    found = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", "-m", "ansible.builtin.find",
         "-a", json.dumps({"paths": str(releases), "file_type": "any", "recurse": True, "depth": 2}), "-o"],
        capture_output=True, text=True, check=True, cwd=REPO,
    )  # fmt: skip
    files = json.loads(found.stdout.split("=>", 1)[1])["files"]
    linked = [str(releases / "r5"), str(releases / "r1")]
    pruned = F.releases_to_prune(files, str(releases), linked, 2)
    assert pruned == ["r2", "r3"]
    leftovers = release_leftovers(HostFiles(root=str(tmp_path)), "/opt/sglang/releases", 2)
    assert leftovers == [f"/opt/sglang/releases/{name}" for name in pruned]


def test_paths_to_write_compares_content_owner_and_mode(tmp_path: Path) -> None:
    """A wanted file is written only when sglang_host_info's read differs in content, owner, group or mode."""
    src = tmp_path / "mod.py"
    src.write_text("x = 1\n")
    wanted = [
        *F.file_entries(["mod.py"], str(tmp_path), "/opt/pkg", notify="Run it"),
        {"dest": "/etc/a.yml", "content": "a: 1\n", "owner": "root", "group": "root", "mode": "0644"},
    ]
    assert wanted[0] == {"src": str(src), "dest": "/opt/pkg/mod.py", "owner": "root", "group": "root", "mode": "0644",
                         "notify": "Run it"}  # fmt: skip
    same = {"exists": True, "owner": "root", "group": "root", "mode": "0644"}
    found = {
        "/opt/pkg/mod.py": same | {"sha1": hashlib.sha1(b"x = 1\n").hexdigest()},
        "/etc/a.yml": same | {"sha1": hashlib.sha1(b"a: 1\n").hexdigest()},
    }
    assert F.paths_to_write(wanted, found) == []
    assert F.paths_to_write(wanted, found | {"/etc/a.yml": found["/etc/a.yml"] | {"mode": "0600"}}) == ["/etc/a.yml"]
    assert F.paths_to_write(wanted, found | {"/opt/pkg/mod.py": {"exists": False}}) == ["/opt/pkg/mod.py"]
    src.write_text("x = 2\n")
    assert F.paths_to_write(wanted, found) == ["/opt/pkg/mod.py"]
    assert F.entry_differs(found["/etc/a.yml"], {"owner": "root", "mode": "0644"}) is False
    assert F.entry_differs(None, {"exists": True}) is True
    dirs = {"/etc/a.yml": {"owner": "root", "mode": "0644"}, "/opt/pkg/mod.py": {"mode": "0755"},
            "/gone": {"exists": True}}  # fmt: skip
    assert F.entries_differing(found, dirs) == ["/opt/pkg/mod.py", "/gone"]
    assert F.entries_differing(found, {"/etc/a.yml": {"owner": "root"}}) == []
    assert F.entries_differing(None, {"/etc/a.yml": {"exists": True}}) == ["/etc/a.yml"]


def test_a_health_answer_passes_the_gate_with_200_and_every_worker() -> None:
    """The gate's rule, on ansible.builtin.uri's result and on the host readers' answer alike."""
    assert F.healthy({"status": 200, "json": {"healthy_workers": 2}}, 2)
    assert F.healthy({"status": 200, "json": {"healthy_workers": 2}}, "2")
    assert not F.healthy({"status": 200, "json": {"healthy_workers": 1}}, 2)
    assert not F.healthy({"status": 200, "json": None}, 2)
    assert F.healthy({"status": 200, "json": None})
    assert not F.healthy({"status": 503, "json": {"healthy_workers": 2}}, 2)
    assert not F.healthy({"status": -1, "msg": "unreachable: refused"})
    assert not F.healthy(None)


def test_a_host_release_needs_the_backends_its_engines_declare() -> None:
    """The production envelope (mooncake, SGLang's default too) on a host of both engines; a host whose decode
    declares nixl needs both packages; a host with no engine needs none."""
    from deploytools import envelope

    hostvars = envelope()
    both = ["sglang_engine", "sglang_prefill", "sglang_decode"]
    assert F.transfer_needs(hostvars, both)["requirements"] == ["mooncake-transfer-engine==0.3.11.post1"]
    assert F.transfer_needs({}, both)["requirements"] == ["mooncake-transfer-engine==0.3.11.post1"]
    mixed = {**hostvars, "sglang_decode": {**hostvars["sglang_decode"], "disaggregation_transfer_backend": "nixl"}}
    assert F.transfer_needs(mixed, both) == {
        "requirements": ["mooncake-transfer-engine==0.3.11.post1", "nixl==1.5.2"],
        "imports": {
            "mooncake.engine": "disaggregation_transfer_backend mooncake imports it "
            "(package mooncake-transfer-engine==0.3.11.post1)",
            "nixl._api": "disaggregation_transfer_backend nixl imports it (package nixl==1.5.2)",
        },
    }
    assert F.transfer_needs(hostvars, ["sglang_router"]) == {"requirements": [], "imports": {}}


PLACES = {
    "bin_dir": "/opt/sglang/bin",
    "env_dir": "/etc/sglang",
    "unit_dir": "/etc/systemd/system",
    "facts_file": "/etc/ansible/facts.d/sglang.fact",
    "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact",
    "file_modes": {name: {"owner": "root", "group": "root", "mode": "0640"} for name in ("script", "env_file", "unit")},
}


def test_the_audit_describes_a_decode_server_once_with_its_files_and_endpoint() -> None:
    hostvars = {"inventory_hostname": "gpu1", "sglang_decode": {"port": 30001, "max_running_requests": 48},
                "sglang_api_key": "s3cret"}  # fmt: skip
    found = F.audit_server("decode", hostvars, True, PLACES, {"ignored": 1}, "", "/opt/sglang/releases", "3")
    record, read = found["record"], found["read"]
    assert (record["host"], record["role"]) == ("gpu1", "decode")
    assert (record["expected_workers"], record["model"]) == (None, None)
    assert record["declared"]["max_running_requests"] == 48 and record["declared"]["api_key"] == "<set>"
    assert "s3cret" not in repr(found)
    assert record["declared_files"]["env_file"] == {"path": "/etc/sglang/dsv4-decode.env", "owner": "root",
                                                    "group": "root", "mode": "0640"}  # fmt: skip
    assert read == {
        "role": "decode",
        "unit": "sglang-dsv4-decode",
        "script": "/opt/sglang/bin/serve_dsv4_decode.sh",
        "env_file": "/etc/sglang/dsv4-decode.env",
        "facts_file": "/etc/ansible/facts.d/sglang.fact",
        "release_fact_file": "/etc/ansible/facts.d/sglang_release.fact",
        "unit_dir": "/etc/systemd/system",
        "releases_dir": "/opt/sglang/releases",
        "keep_releases": 3,
        "endpoint": "http://127.0.0.1:30001",
        "metrics": True,
    }


def test_the_audit_describes_a_router_with_the_workers_it_expects_and_no_releases() -> None:
    workers = {"prefill": ["http://10.0.0.1:30000"], "decode": ["http://10.0.0.2:30001"]}
    found = F.audit_server("router", {"inventory_hostname": "r1", "sglang_router": {"port": 8000}}, False, PLACES,
                           workers, "", "/opt/sglang/releases", 3)  # fmt: skip
    assert found["record"]["expected_workers"] == workers and found["record"]["model"] is None
    assert (found["read"]["unit"], found["read"]["releases_dir"], found["read"]["endpoint"]) == (
        "sglang-dsv4-router",
        None,
        "http://127.0.0.1:8000",
    )
