"""Audit test helpers: run the library modules in-process with the repository's module_utils and a mocked transport,
and judge what they read as the audit's report does (sglang_drift.judge).

Inside Ansible the modules import `ansible.module_utils.sglang_*` from the AnsiballZ bundle; here those names are
aliased to the installed `sglang_envelope` package (the same files).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import io
import json
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import redirect_stdout
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

REPO = Path(__file__).resolve().parents[3]
MODELS = REPO / "models"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SECRET = "sk-lab-secret-123"

for _path in sorted((REPO / "collections/ansible_collections/sglang/dsv4/plugins/module_utils").glob("[!_]*.py")):
    _name = _path.stem
    sys.modules.setdefault(
        f"ansible.module_utils.{_name}",
        importlib.import_module(f"ansible_collections.sglang.dsv4.plugins.module_utils.{_name}"),
    )

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import judge  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Reply, TransportError  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import normalize  # noqa: E402


def load_model(name: str) -> dict[str, Any]:
    return dict(json.loads((MODELS / name / "config.json").read_text()))


def model_inputs(name: str) -> dict[str, Any]:
    """Capacity-model inputs of the lab inventory (DeepSeek-V4-Flash on 141 GiB GPUs)."""
    return {"config": load_model(name), "gpu_memory_gib": 141, "params_b": 284, "quantization": "mxfp4"}


def load_library(name: str, kind: str = "modules") -> ModuleType:
    """Import plugins/<kind>/<name>.py as a module (a module is a script, an action a plugin: not package members)."""
    # Named by its import path, as mutation testing names the functions it mutates there (make mutation).
    spec = importlib.util.spec_from_file_location(
        f"ansible_collections.sglang.dsv4.plugins.{kind}.{name}",
        REPO / "collections/ansible_collections/sglang/dsv4/plugins" / kind / f"{name}.py",
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fixture_body(name: str) -> Any:
    """A fixture as the server sends it: JSON without its `_provenance` note (see fixtures/README.md)."""
    text = (FIXTURES / name).read_text()
    if not name.endswith(".json"):
        return text
    body = json.loads(text)
    if isinstance(body, dict):
        body.pop("_provenance", None)
    return body


def set_path(data: Any, dotted: str, value: Any) -> None:
    """Set data['a'][0]['b'] for 'a.0.b'; a value of '__delete__' removes the key."""
    parts = dotted.split(".")
    for part in parts[:-1]:
        data = data[int(part)] if isinstance(data, list) else data[part]
    last = parts[-1]
    if value == "__delete__":
        del data[last]
    elif isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


OPEN_PATHS = ("/health", "/ready", "/metrics")  # SGLang serves these without the API key


class FixtureTransport:
    """Answers GETs from a case's `http` table: fixture bodies, patches, statuses, raised transport errors.

    With `require_key`, protected paths answer 401 {"error":"Unauthorized"} unless the bearer matches, as SGLang does.
    """

    def __init__(self, table: Mapping[str, Any], require_key: str | None = None) -> None:
        self.table = table
        self.require_key = require_key
        self.calls: list[str] = []
        self.lock = threading.Lock()

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        path = "/" + url.split("/", 3)[3] if url.count("/") >= 3 else "/"
        with self.lock:
            self.calls.append(path)
        spec = self.table.get(path)
        if spec is None:
            return Reply(404, b'{"detail":"Not Found"}')
        if "error" in spec:
            raise TransportError(spec["error"], spec.get("reason", spec["error"]))
        if self.require_key and not path.startswith(OPEN_PATHS):
            if headers.get("Authorization") != f"Bearer {self.require_key}":
                return Reply(401, b'{"error":"Unauthorized"}')
        if "raw" in spec:
            return Reply(int(spec.get("status", 200)), str(spec["raw"]).encode())
        body = copy.deepcopy(fixture_body(spec["fixture"])) if "fixture" in spec else spec.get("json")
        for dotted, value in (spec.get("patch") or {}).items():
            set_path(body, dotted, value)
        raw = body if isinstance(body, str) else json.dumps(body)
        return Reply(int(spec.get("status", 200)), raw.encode())


def run_module(module: ModuleType, args: dict[str, Any], transport: Any = None, host: Any = None) -> dict[str, Any]:
    """Run a library module's main() with `args`; return its JSON result (exit_json or fail_json)."""
    if transport is not None:
        module.build_transport = lambda _module: transport  # type: ignore[attr-defined]
    if host is not None:
        module.HostFiles = lambda **_kwargs: host  # type: ignore[attr-defined]
    out = io.StringIO()
    with patch_module_args(args), redirect_stdout(out), pytest.raises(SystemExit):
        module.main()
    return dict(json.loads(out.getvalue()))


def load_cases(path: Path) -> list[Any]:
    """The `cases` list of a YAML case table (the file may also hold anchors under other keys)."""
    data = yaml.safe_load(path.read_text())
    cases = data["cases"] if isinstance(data, dict) else data
    return [pytest.param(case, id=case["id"]) for case in cases]


def subset(expected: Any, actual: Any, where: str = "") -> Iterator[str]:
    """Mismatches of `expected` within `actual`: dicts compare key by key, everything else exactly."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key, value in expected.items():
            if key not in actual:
                yield f"{where}.{key}: missing"
            else:
                yield from subset(value, actual[key], f"{where}.{key}")
    elif expected != actual:
        yield f"{where}: expected {expected!r}, got {actual!r}"


# What a server is judged against, and the host layers the case states directly (the judge's inputs).
JUDGE_INPUTS = ("declared", "model", "expected_workers", "declared_files")
HOST_LAYERS = ("on_disk", "running", "deployed", "restart_pending", "in_progress", "cpus")


def audit_server(args: Mapping[str, Any], transport: Any) -> dict[str, Any]:
    """One server audited as the playbook does it: the sglang_live_info module on the host (`args` minus the judge's
    inputs), then the controller's judge over its result, the host layers in `args` and the declaration.

    Returns the module's result with the verdict's rows, drift, drift_count and predicted; `live`, `sources` and
    `notes` are the effective layer judged (with what the judge inferred); the judge's warnings join the module's."""
    reader = {k: v for k, v in args.items() if k not in JUDGE_INPUTS + HOST_LAYERS}
    declared = dict(args.get("declared") or {})
    reader.setdefault("metrics", declared.get("enable_metrics") is not False)
    result = run_module(load_library("sglang_live_info"), reader, transport)
    if result.get("failed"):
        return result
    role = str(args["role"])
    host = {k: args[k] for k in HOST_LAYERS if k in args}
    verdict = judge(
        role, normalize(role, declared, "declared"), host, result, args.get("model"),
        declared_files=args.get("declared_files"), expected_workers=args.get("expected_workers"),
    ).as_dict()  # fmt: skip
    name = args.get("name") or result["name"]
    return {
        **result,
        **{k: verdict[k] for k in ("rows", "drift", "drift_count", "predicted")},
        "live": verdict["effective"] or {},
        "sources": verdict["sources"] or result["sources"],
        "notes": verdict["notes"] or result["notes"],
        "warnings_seen": result["warnings_seen"] + [f"{name}: {w}" for w in verdict["warnings"]],
    }
