"""The drift exporter judges as the audit does (same readers, same judgement), writes a valid textfile, and the drift
rule fires on it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path[:0] = [
    str(REPO / "tests" / "unit" / "audit"),
    str(REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_monitoring/files"),
]

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (  # noqa: E402
    DRIFT_JOB,
    RULES_FILE,
    Policy,
    drift_alerts,
    expand_labels,
    rule_file,
)
from audit_helpers import SECRET, FixtureTransport, load_cases, model_inputs  # noqa: E402
from audit_helpers import audit_server as audit_role_server  # noqa: E402
from promtools import run_promtool, series_from_scrapes, write  # noqa: E402
from sglang_drift_export import audit_server, exposition, main  # noqa: E402
from test_sglang_layers import layout_args  # noqa: E402

LIMITS_CASES = REPO / "tests" / "unit" / "audit" / "test_server_audit.yaml"
HOST_LAYERS = ("on_disk", "running", "deployed", "in_progress", "restart_pending")


def _engine_cases() -> list[dict[str, Any]]:
    """The audit's engine cases that take only the declaration and the live answers."""
    return [
        c
        for c in (p.values[0] for p in load_cases(LIMITS_CASES))
        if c["input"]["role"] != "router" and not set(c["input"]) & set(HOST_LAYERS)
    ]


def _host(root: Path, role: str, api_key: str | None = SECRET) -> HostFiles:
    """A host whose environment file holds the key the case's module call was given (none: no file)."""
    if api_key:
        env = root / layout_args(role)["env_file"].lstrip("/")
        env.parent.mkdir(parents=True, exist_ok=True)
        env.write_text(f"SGLANG_API_KEY={api_key}\n")
    return HostFiles(root=str(root))


def _spec(case: dict[str, Any]) -> dict[str, Any]:
    args = case["input"]
    return {
        "server": f"lab1:{args['role']}",
        "role": args["role"],
        "endpoint": args["endpoint"],
        "declared": args["declared"],
        "model": model_inputs(case["model"]) if case.get("model") else None,
        **layout_args(args["role"], facts=False),
    }


@pytest.mark.parametrize("case", _engine_cases(), ids=lambda c: c["id"])
def test_the_exporter_finds_what_the_audit_finds(case: dict[str, Any], tmp_path: Path) -> None:
    args = dict(case["input"])
    if case.get("model"):
        args["model"] = model_inputs(case["model"])
    module = audit_role_server(args, FixtureTransport(case["http"], case.get("require_key")))
    # Every case of the table is one the audit module takes: a refusal is a failure, never a reason to skip.
    assert not module.get("failed"), f"the audit module refuses this input: {module.get('msg')}"
    exported = audit_server(
        _spec(case),
        _host(tmp_path, args["role"], args.get("api_key")),
        FixtureTransport(case["http"], case.get("require_key")),
    )
    audited = {(d["key"], d["layer"]) for d in module["drift"] if d["severity"] == "drift"}
    assert {(d["key"], d["layer"]) for d in exported.drift} == audited
    assert exported.ok == (module["status"] != "unreachable" and bool(module["live"]))


def test_textfile_is_valid_and_the_drift_rule_fires_on_it(tmp_path: Path, promtool: str) -> None:
    case = next(c for c in _engine_cases() if c["id"] == "index_k_inferred_fp8_from_the_pool_is_drift")
    exported = audit_server(_spec(case), _host(tmp_path, "decode"), FixtureTransport(case["http"]))
    assert ("bf16_index_k", "effective") in {(d["key"], d["layer"]) for d in exported.drift}
    text = exposition([exported], 1_700_000_000.0)
    assert 'sglang_envelope_drift{server="lab1:decode",key="bf16_index_k",layer="effective"} 1' in text
    assert 'sglang_envelope_effective{server="lab1:decode",key="bf16_index_k"} 0.0' in text
    (tmp_path / "drift.prom").write_text(text)
    checked = run_promtool(promtool, "check", "metrics", cwd=tmp_path, stdin=text)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    policy = Policy(drift_period_s=20)
    alerts = {"drift": drift_alerts(policy, ["lab1:decode"])}
    drift = alerts["drift"][0]
    labels = {"server": "lab1:decode", "key": "bf16_index_k", "layer": "effective"}
    write(tmp_path / RULES_FILE, rule_file(alerts))
    test = {
        "name": "exporter textfile",
        "interval": "1m",
        "input_series": series_from_scrapes([text, text], {"job": DRIFT_JOB}, 3),
        "alert_rule_test": [
            {
                "eval_time": "2m",
                "alertname": drift.name,
                "exp_alerts": [
                    {
                        "exp_labels": {**labels, **drift.labels},
                        "exp_annotations": {
                            "summary": expand_labels(drift.summary, labels),
                            "description": expand_labels(drift.description, labels),
                        },
                    }
                ],
            }
        ],
    }
    write(tmp_path / "t.yml", {"rule_files": [RULES_FILE], "evaluation_interval": "1m", "tests": [test]})
    tested = run_promtool(promtool, "test", "rules", "t.yml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_bad_config_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--config", str(tmp_path / "missing.json")]) == 2
    assert "cannot read --config" in capsys.readouterr().err
