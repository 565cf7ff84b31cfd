"""The audit report: tables with drift marks, capacity from the live pool, files written, exit decision."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_report
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import (
    build,
    render_markdown,
    render_text,
    write,
)
from audit_helpers import SECRET, FixtureTransport, load_library, model_inputs, run_module

CASES = yaml.safe_load(Path(__file__).with_name("test_server_audit.yaml").read_text())
DECODE = CASES["declared"]["decode"]
ROUTER = CASES["declared"]["router"]
live_module = load_library("sglang_live_info")
report = load_library("sglang_audit_report", "action").report

HTTP = {
    "/server_info": {"fixture": "server_info_decode.json"},
    "/v1/models": {"fixture": "models.json"},
    "/v1/loads": {"fixture": "loads_decode.json"},
    "/metrics": {"fixture": "metrics_decode.txt"},
}
ROUTER_HTTP = {"/readiness": {"fixture": "router_readiness.json"}, "/workers": {"fixture": "router_workers.json"}}


def decode_record(
    host: str = "lab1",
    models_patch: dict[str, Any] | None = None,
    pool: int | None = None,
    **declared: Any,
) -> dict[str, Any]:
    """The audit record of the decode fixture; `pool` patches in a smaller KV pool (a synthetic departure)."""
    table = dict(HTTP)
    if models_patch:
        table["/v1/models"] = {"fixture": "models.json", "patch": models_patch}
    if pool is not None:
        patch = {"max_total_num_tokens": pool, "internal_states.0.memory_usage.token_capacity": pool}
        table["/server_info"] = {"fixture": "server_info_decode.json", "patch": patch}
        table["/v1/loads"] = {"fixture": "loads_decode.json", "patch": {"loads.0.max_total_num_tokens": pool}}
        table["/metrics"] = {"status": 404, "raw": '{"detail":"Not Found"}'}
    args = {"endpoint": "http://127.0.0.1:30001", "role": "decode", "api_key": SECRET, "name": host}
    live = run_module(live_module, args, FixtureTransport(table))
    envelope = {**DECODE, **declared}
    layers = {"running_source": "proc", "restart_pending": False, "problems": [], "notes": [],
              "on_disk": envelope, "running": envelope}  # fmt: skip
    return {"host": host, "role": "decode", "layers": layers, "live": live, "declared": envelope,
            "model": model_inputs("deepseek-v4-flash")}  # fmt: skip


def router_record(**declared: Any) -> dict[str, Any]:
    envelope = {**ROUTER, **declared}
    args = {"endpoint": "http://127.0.0.1:8000", "role": "router", "name": "lab1"}
    live = run_module(live_module, args, FixtureTransport(ROUTER_HTTP))
    layers = {"running_source": "files", "restart_pending": False, "problems": [], "notes": [],
              "on_disk": envelope, "running": envelope}  # fmt: skip
    return {"host": "lab1", "role": "router", "layers": layers, "live": live, "declared": envelope}


def test_clean_fleet_passes_and_names_the_binding_limit() -> None:
    report = build([decode_record(), router_record(max_concurrent_requests=128)])
    assert report.summary == {"servers": 2, "ok": 2, "drift": 0, "unreachable": 0, "error": 0,
                              "drift_items": 0, "failed": False}  # fmt: skip
    fleet = report.fleet
    assert fleet["decode_running"] == 64 and fleet["router_max_concurrent_requests"] == 128
    assert (fleet["parallel_calls"], fleet["binding"]) == (64, "decode fleet max_running_requests")
    decode = report.servers[0]
    # SGLang's pool for this envelope: 11,159,040 tokens. The longest call served (131,070 tokens) takes 512 pages
    # of 256, and PD decode admission keeps 512 tokens free per call: 84 fit (84 x 131,584 = 11,053,056; 85
    # would need 11,184,640); 64 slots run.
    assert decode.capacity["pool_tokens"] == 11_159_040
    assert decode.capacity["full_length_fit"] == 84
    assert decode.capacity["full_length_at_once"] == 64
    assert decode.capacity["bf16_index_k"] is True
    share = decode.capacity["bf16_index_share"]
    assert 0 < share < 1
    text = render_text(report)
    assert "parallel calls: 64, bound by decode fleet max_running_requests" in text
    # 85 fit in the pools at the full context, so the running slots bind there too, not the KV pools.
    assert "full context of 131072 tokens: 64, bound by decode fleet max_running_requests\n" in text
    assert "84 full-length requests fit; with max_running_requests 64, 64 run at once" in text
    assert f"bf16 index keys cost {share * 100:.1f}% of the KV pool" in text


def test_a_small_pool_binds_at_full_context() -> None:
    """A pool patched down to 1,843,200 tokens (7,200 pages): 7,200 // 512 = 14 full-length requests, fewer than 64."""
    report = build([decode_record(pool=1_843_200), router_record(max_concurrent_requests=128)])
    decode = report.servers[0]
    assert decode.capacity["full_length_fit"] == 14
    assert decode.capacity["full_length_at_once"] == 14
    text = render_text(report)
    assert "parallel calls: 64, bound by decode fleet max_running_requests" in text
    assert "parallel calls at the full context of 131072 tokens: 14, bound by decode KV pools at full context" in text
    assert "14 full-length requests fit" in text


def test_router_binds_when_it_admits_fewer_than_the_decode_fleet_runs() -> None:
    report = build([decode_record(), router_record(max_concurrent_requests=32)])
    assert (report.fleet["parallel_calls"], report.fleet["binding"]) == (32, "router max_concurrent_requests")
    assert "router: 32 in flight, then 128 queued for up to 60 s, then 429" in render_text(report)


def test_equal_limits_are_named_together() -> None:
    report = build([decode_record(), router_record(max_concurrent_requests=64)])
    assert report.fleet["binding"] == "router max_concurrent_requests = decode fleet max_running_requests"


def test_table_marks_the_drifting_cell_only() -> None:
    report = build([decode_record(models_patch={"data.0.max_model_len": 65536})])
    text = render_text(report)
    line = next(x for x in text.splitlines() if x.strip().startswith("context_length"))
    cells = line.split()
    assert cells == ["context_length", "131072", "131072", "131072", "65536", "*"], line
    line = next(x for x in text.splitlines() if x.strip().startswith("max_running_requests"))
    assert "*" not in line
    assert "drift: context_length from effective [effective]: /v1/models max_model_len is 65536" in text
    md = render_markdown(report)
    assert "| context_length | 131072 | 131072 | 131072 | **65536** (drift) |" in md
    assert report.summary["failed"] is True and report.servers[0].status == "drift"
    assert (
        build([decode_record(models_patch={"data.0.max_model_len": 65536})], fail_on_drift=False).summary["failed"]
        is False
    )


def test_unreachable_host_is_reported_as_such_never_as_drift() -> None:
    records = [
        decode_record(),
        {"host": "gpu7", "role": "decode", "layers": {"unreachable": True, "msg": "ssh: connect timed out"},
         "live": {"skipped": True}},
        {"host": "gpu8", "role": "host", "host_unreachable": "the audit did not read this host"},
    ]  # fmt: skip
    report = build(records, fail_on_drift=False)
    by_host = {s.host: s for s in report.servers}
    assert by_host["gpu7"].status == "unreachable" and by_host["gpu7"].drift == []
    assert by_host["gpu7"].errors == ["gpu7: host unreachable: ssh: connect timed out"]
    assert by_host["gpu8"].status == "unreachable"
    assert report.summary["unreachable"] == 2 and report.summary["drift"] == 0
    assert report.summary["failed"] is True  # unreachable fails even without fail_on_drift
    assert "gpu7 decode (version unknown): UNREACHABLE" in render_text(report)


def test_engine_down_is_unreachable_and_a_read_error_is_an_error() -> None:
    down = decode_record()
    down["live"] = run_module(
        live_module,
        {"endpoint": "http://127.0.0.1:30001", "role": "decode", "name": "lab1"},
        FixtureTransport({p: {"error": "unreachable", "reason": "refused"} for p in HTTP}),
    )
    failed = {"host": "lab2", "role": "prefill", "failed": "systemctl show failed (rc=1)"}
    report = build([down, failed])
    assert [s.status for s in report.servers] == ["error", "unreachable"]
    assert report.servers[0].errors == ["lab2: prefill: the audit task failed: systemctl show failed (rc=1)"]


def test_files_are_written_and_hold_no_secret(tmp_path: Path) -> None:
    report = build([decode_record(models_patch={"data.0.max_model_len": 65536}), router_record()])
    files = write(report, tmp_path / "audit-1")
    data = json.loads(Path(files["json"]).read_text())
    assert data["summary"]["drift"] == 1
    decode = next(s for s in data["servers"] if s["role"] == "decode")
    assert [(d["key"], d["layer"]) for d in decode["drift"] if d["severity"] == "drift"] == [
        ("context_length", "effective")
    ]
    assert decode["capacity"]["table"][-1]["context_len"] == 65536
    assert "**65536** (drift)" in Path(files["markdown"]).read_text()
    if sglang_report.render_svg is not None:
        svg = Path(files["chart:lab1-decode.svg"]).read_text()
        ElementTree.fromstring(svg)  # well-formed
        assert "lab1-decode.svg" in Path(files["markdown"]).read_text()
    for path in files.values():
        assert SECRET not in Path(path).read_text(), path


def test_report_action_writes_and_returns_the_table(tmp_path: Path) -> None:
    args = {"records": [decode_record(), router_record()], "directory": str(tmp_path / "r")}
    result = report(args)
    assert result["changed"] is False and result["summary"]["failed"] is False
    assert "lab1 decode (sglang 0.5.23, http://127.0.0.1:30001): OK" in result["table"]
    assert Path(result["files"]["json"]).is_file() and Path(result["files"]["markdown"]).is_file()
    assert json.loads(Path(result["files"]["json"]).read_text())["summary"] == result["summary"]


def test_report_action_refuses_bad_arguments_and_an_unwritable_folder(tmp_path: Path) -> None:
    with pytest.raises(AnsibleActionFail, match="missing required arguments: directory"):
        report({"records": [decode_record()]})
    (tmp_path / "file").write_text("")
    with pytest.raises(AnsibleActionFail, match=f"cannot write the report into {tmp_path}/file/r"):
        report({"records": [decode_record()], "directory": str(tmp_path / "file" / "r")})


@pytest.mark.parametrize(
    ("value", "text"), [(None, "-"), (True, "true"), ([1, 2, 4, 8, 16], "1,2,…,16 (5)"), (0.83, "0.83"), (7, "7")]
)
def test_cell_formatting(value: Any, text: str) -> None:
    assert sglang_report.fmt(value) == text


def test_risks_are_judged_on_the_live_values_with_fixes_from_the_declaration() -> None:
    """The fixture's live pool holds far fewer full-context calls than the router admits: a risk with fixes."""
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import fleet_from_inventory
    from sglang_envelope_cli.commands import model_config_for
    from shipped import shipped_inventory

    hostvars, groups = shipped_inventory("lab")
    fleet = fleet_from_inventory(hostvars, groups)
    config = model_config_for(hostvars[fleet.hosts("decode")[0]])
    # 84 calls of the longest the fixture's 131,072-token context serves fit, 64 run: a router admitting 128 is
    # above that.
    records = [decode_record(host=fleet.hosts("decode")[0]), router_record(max_concurrent_requests=128)]
    report = build(records, declared=fleet, model_config=config)
    admission = next(r for r in report.risks if r["id"] == "router_admits_beyond_full_context")
    live = report.servers[0].live
    assert admission["numbers"]["router_max_concurrent_requests"] == 128
    assert admission["numbers"]["decode_holds"] == 64
    assert admission["numbers"]["tokens_per_call"] == live["context_length"] - 2
    assert admission["fixes"] and all(fix["valid"] for fix in admission["fixes"])
    text = render_text(report)
    assert "risks (from the live values):" in text and "warn: router_admits_beyond_full_context" in text
    assert "## Risks (from the live values)" in render_markdown(report)
    assert report.as_dict()["risks"] == report.risks
    without = build(records)  # no declaration: the same risks, no fixes
    assert [r["id"] for r in without.risks] == [r["id"] for r in report.risks]
    assert all(not r["fixes"] for r in without.risks)
