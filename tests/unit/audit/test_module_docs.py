"""The modules document themselves: ansible-doc renders them, and RETURN names exactly what they return."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from audit_helpers import REPO, FixtureTransport, load_library, run_module

MODULES = ("sglang_limits", "sglang_layers", "sglang_audit_report")
ANSIBLE_DOC = Path(sys.executable).with_name("ansible-doc")


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_renders(name: str) -> None:
    proc = subprocess.run(
        [str(ANSIBLE_DOC), "-M", str(REPO / "library"), "--json", name],
        capture_output=True, text=True, check=False, cwd=REPO,
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
    source = (REPO / "library" / f"{name}.py").read_text()
    spec_block = source[source.index("argument_spec={") : source.index("supports_check_mode")]
    in_spec = {opt for opt in documented if f'"{opt}": {{' in spec_block}
    assert in_spec == documented, documented - in_spec


def test_sglang_limits_returns_what_return_documents() -> None:
    module = load_library("sglang_limits")
    documented = set(yaml.safe_load(module.RETURN))
    engine = {"/server_info": {"fixture": "server_info_decode.json"}, "/v1/models": {"fixture": "models.json"}}
    router = {"/readiness": {"fixture": "router_readiness.json"}, "/workers": {"fixture": "router_workers.json"}}
    returned: set[str] = set()
    for role, table in (("decode", engine), ("router", router)):
        result = run_module(module, {"endpoint": "http://127.0.0.1:1", "role": role}, FixtureTransport(table))
        returned |= set(result) - {"changed", "invocation"}
    assert returned == documented, (returned - documented, documented - returned)


@pytest.mark.parametrize("name", ["sglang_layers", "sglang_audit_report"])
def test_other_modules_document_every_returned_key(name: str) -> None:
    module = load_library(name)
    documented = set(yaml.safe_load(module.RETURN))
    source = (REPO / "library" / f"{name}.py").read_text()
    for key in documented:
        assert f'"{key}"' in source or f"{key}=" in source, f"{name}: RETURN documents {key} but the code never sets it"
