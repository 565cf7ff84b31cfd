"""The modules document themselves: ansible-doc renders them, and RETURN names exactly what they return."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from audit_helpers import REPO, FixtureTransport, load_cases, load_library, run_module
from test_sglang_layers import CASES, TICKS, build_host, layout_args

MODULES = ("sglang_live_info", "sglang_layers_info", "sglang_servers_info", "sglang_audit_report")
# Modules that are action plugins: their argument spec is the action's.
ACTIONS = {"sglang_audit_report": load_library("sglang_audit_report", "action").ARGUMENT_SPEC}
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name: str) -> None:
    proc = subprocess.run(
        [str(ANSIBLE_DOC), "-M", str(REPO / "collections/ansible_collections/sglang/dsv4/plugins/modules"), "--json",
        name], capture_output=True, text=True, check=False, cwd=REPO,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)[name]
    assert doc["doc"]["short_description"] and doc["doc"]["options"] and doc["return"]
    assert doc["doc"]["attributes"]["check_mode"]["support"] == "full"
    assert "- name:" in doc["examples"]


@pytest.mark.parametrize("name", MODULES)
def test_argument_spec_matches_the_documented_options(name: str) -> None:
    module = load_library(name)
    documented = set(yaml.safe_load(module.DOCUMENTATION)["options"])
    if name in ACTIONS:
        assert set(ACTIONS[name]) == documented
        return
    source = (REPO / "collections/ansible_collections/sglang/dsv4/plugins/modules" / f"{name}.py").read_text()
    spec_block = source[source.index("argument_spec={") : source.index("supports_check_mode")]
    in_spec = {opt for opt in documented if f'"{opt}": {{' in spec_block}
    assert in_spec == documented, documented - in_spec


def test_live_info_returns_what_return_documents() -> None:
    module = load_library("sglang_live_info")
    documented = set(yaml.safe_load(module.RETURN))
    engine = {"/server_info": {"fixture": "server_info_decode.json"}, "/v1/models": {"fixture": "models.json"}}
    router = {"/readiness": {"fixture": "router_readiness.json"}, "/workers": {"fixture": "router_workers.json"}}
    returned: set[str] = set()
    for role, table in (("decode", engine), ("router", router)):
        result = run_module(module, {"endpoint": "http://127.0.0.1:1", "role": role}, FixtureTransport(table))
        returned |= set(result) - {"changed", "invocation"}
    assert returned == documented, (returned - documented, documented - returned)


def test_layers_info_returns_what_return_documents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else os.sysconf(name))
    case = next(p.values[0] for p in load_cases(CASES) if p.id == "decode_files_and_process_agree")
    module = load_library("sglang_layers_info")
    result = run_module(
        module, layout_args("decode", facts=False) | {"role": "decode"}, host=build_host(tmp_path, case)
    )
    documented = set(yaml.safe_load(module.RETURN))
    returned = set(result) - {"changed", "invocation"}
    assert returned == documented, (returned - documented, documented - returned)


@pytest.mark.parametrize("name", ["sglang_audit_report"])
def test_actions_document_every_returned_key(name: str) -> None:
    module = load_library(name)
    documented = set(yaml.safe_load(module.RETURN))
    source = (REPO / "collections/ansible_collections/sglang/dsv4/plugins/action" / f"{name}.py").read_text()
    for key in documented:
        assert f'"{key}"' in source or f"{key}=" in source, f"{name}: RETURN documents {key} but the code never sets it"
