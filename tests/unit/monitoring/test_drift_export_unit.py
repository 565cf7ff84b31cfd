"""The drift exporter (roles/sglang_monitoring/files/sglang_drift_export.py): what it audits of one engine (which files,
unit, key, facts and timeout it uses, which findings become series), the exact textfile it writes, how it writes it, and
its command line.

The engine answers are the audit's case table (tests/unit/audit/test_server_audit.yaml: SGLang 0.5.23's own
bodies, patched where a case says so); the hosts are built under a temporary root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

AUDIT = Path(__file__).resolve().parents[1] / "audit"
EXPORTER = (
    Path(__file__).resolve().parents[3] / "collections/ansible_collections/sglang/dsv4/roles/sglang_monitoring/files"
)
sys.path[:0] = [str(AUDIT), str(EXPORTER)]

import sglang_drift_export as export  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Reply  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles  # noqa: E402
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import EnvelopeError  # noqa: E402
from audit_helpers import SECRET, FixtureTransport, load_cases, model_inputs  # noqa: E402
from test_sglang_layers import CASES as LAYER_CASES  # noqa: E402
from test_sglang_layers import TICKS, build_host, layout_args  # noqa: E402

ENGINE_CASES = {p.id: p.values[0] for p in load_cases(AUDIT / "test_server_audit.yaml")}
SCRIPT = "/opt/sglang/bin/serve_dsv4_decode.sh"
ENV = "/etc/sglang/dsv4-decode.env"
FACTS = "/etc/ansible/facts.d/sglang.fact"
NOT_DEPLOYED = f"{SCRIPT} does not exist: the server is not deployed here"
FP8_EXPLANATION = (
    "the engine budgets fp8 index keys although bf16 is declared: needles beyond about 2,000 tokens are lost again; "
    "check SGLANG_DSV4_BF16_INDEX_K in the env file and that the release is the patched fork"
)
# The live values of the fp8 case, as the exporter exports them (booleans 0/1, strings left out).
FP8_EFFECTIVE = {
    "port": 30001.0,
    "context_length": 131072.0,
    "max_running_requests": 64.0,
    "chunked_prefill_size": 8192.0,
    "max_prefill_tokens": 16384.0,
    "mem_fraction_static": 0.83,
    "page_size": 256.0,
    "swa_full_tokens_ratio": 0.1,
    "tp_size": 4.0,
    "dp_size": 1.0,
    "base_gpu_id": 4.0,
    "cuda_graph_max_bs_decode": 64.0,
    "cuda_graph_max_bs_prefill": 8192.0,
    "disable_radix_cache": 1.0,
    "watchdog_timeout": 600.0,
    "enable_metrics": 1.0,
    "enable_cache_report": 1.0,
    "trust_remote_code": 1.0,
    "enable_deepseek_v4_fp4_indexer": 0.0,
    "max_total_tokens": 12184320.0,
    "bf16_index_k": 0.0,
}


class Recording:
    """The case's transport, recording (path, Authorization header, timeout) of every GET."""

    def __init__(self, case_id: str, require_key: str | None = None) -> None:
        self.inner = FixtureTransport(ENGINE_CASES[case_id]["http"], require_key)
        self.seen: list[tuple[str, str | None, float]] = []

    def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
        self.seen.append((url, headers.get("Authorization"), timeout))
        return self.inner.get(url, headers, timeout)


def spec(case_id: str = "index_k_inferred_fp8_from_the_pool_is_drift", **extra: Any) -> dict[str, Any]:
    """A server entry of the exporter's config for an engine case (with the lab's capacity-model inputs and the
    layout's files, as the monitoring role writes it)."""
    case = ENGINE_CASES[case_id]
    role = str(extra.get("role", "decode"))
    out = {
        "server": "lab1:decode",
        "role": role,
        "endpoint": case["input"]["endpoint"],
        "declared": case["input"]["declared"],
        "model": model_inputs("deepseek-v4-flash"),
        **layout_args(role),
    }
    return {**out, **extra}


def write(root: Path, path: str, text: str, mode: int = 0o644) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    os.chmod(target, mode)
    return target


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.sysconf
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else real(name))


# ---------------------------------------------------------------- one engine's audit


def test_an_engine_host_without_files_exports_the_live_drift(tmp_path: Path) -> None:
    """Severity drift only (the pool's info item is left out); every numeric or boolean live value; no key sent
    without an env file; each endpoint read with the 10 s default timeout."""
    transport = Recording("index_k_inferred_fp8_from_the_pool_is_drift")
    audit = export.audit_server(spec(), HostFiles(root=str(tmp_path)), transport)
    assert audit == export.ServerAudit(
        "lab1:decode",
        ok=True,
        drift=[{"key": "bf16_index_k", "layer": "effective", "explanation": FP8_EXPLANATION}],
        effective=FP8_EFFECTIVE,
        errors=[NOT_DEPLOYED],
    )
    assert sorted(transport.seen) == [
        ("http://127.0.0.1:30001/metrics", None, 10.0),
        ("http://127.0.0.1:30001/server_info", None, 10.0),
        ("http://127.0.0.1:30001/v1/loads", None, 10.0),
        ("http://127.0.0.1:30001/v1/models", None, 10.0),
    ]


def test_without_a_model_the_pool_tells_nothing(tmp_path: Path) -> None:
    """The capacity-model inputs of the entry are what infers the index-key dtype from the pool."""
    audit = export.audit_server(
        spec(model=None), HostFiles(root=str(tmp_path)), Recording("index_k_inferred_fp8_from_the_pool_is_drift")
    )
    assert audit.drift == [] and "bf16_index_k" not in audit.effective
    assert audit.effective["max_total_tokens"] == 12184320.0


def test_an_unreachable_engine_is_not_ok_and_named_in_the_errors(tmp_path: Path) -> None:
    transport = Recording("connection_refused")
    audit = export.audit_server(spec("connection_refused", name="engine-a"), HostFiles(root=str(tmp_path)), transport)
    refused = "unreachable ([Errno 111] Connection refused); nothing answers there: is the unit running?"
    assert audit == export.ServerAudit(
        "lab1:decode",
        ok=False,
        errors=[
            NOT_DEPLOYED,
            *(
                f"engine-a: GET http://127.0.0.1:30001{path}: {refused}"
                for path in ("/server_info", "/v1/models", "/v1/loads", "/metrics")
            ),
        ],
    )


def test_errors_name_the_server_when_the_entry_has_no_name(tmp_path: Path) -> None:
    audit = export.audit_server(
        spec("connection_refused", name=""), HostFiles(root=str(tmp_path)), Recording("connection_refused")
    )
    assert audit.errors[1].startswith("lab1:decode: GET http://127.0.0.1:30001/server_info: unreachable")


@pytest.mark.parametrize(
    ("env_file", "written", "text", "sent"),
    [
        (None, ENV, f"SGLANG_API_KEY={SECRET}\n", f"Bearer {SECRET}"),
        ("/srv/keys/decode.env", "/srv/keys/decode.env", f"X=1\nSGLANG_API_KEY={SECRET}\n", f"Bearer {SECRET}"),
        (None, ENV, "SGLANG_API_KEY=\n", None),
        (None, ENV, "OTHER=1\n", None),
        (None, ENV, "", None),
        ("/srv/keys/decode.env", ENV, f"SGLANG_API_KEY={SECRET}\n", None),
    ],
    ids=["default-file", "named-file", "empty-key", "no-key", "empty-file", "other-file"],
)
def test_the_engine_key_comes_from_the_env_file(
    tmp_path: Path, env_file: str | None, written: str, text: str, sent: str | None
) -> None:
    write(tmp_path, written, text)
    transport = Recording("decode_no_drift", require_key=SECRET)
    entry = spec("decode_no_drift", model=None, **({"env_file": env_file} if env_file else {}))
    audit = export.audit_server(entry, HostFiles(root=str(tmp_path)), transport)
    assert {auth for _, auth, _ in transport.seen} == {sent}
    assert audit.ok is (sent is not None)


def test_the_timeout_of_the_entry_is_used_for_every_read(tmp_path: Path) -> None:
    transport = Recording("decode_no_drift")
    export.audit_server(spec("decode_no_drift", timeout="2.5"), HostFiles(root=str(tmp_path)), transport)
    assert [t for _, _, t in transport.seen] == [2.5] * 4


@pytest.mark.parametrize(
    ("extra", "role", "script", "unit"),
    [
        ({}, "decode", SCRIPT, "sglang-dsv4-decode"),
        ({}, "prefill", "/opt/sglang/bin/serve_dsv4_prefill.sh", "sglang-dsv4-prefill"),
        ({"script": "/srv/run.sh", "unit": "my-engine"}, "decode", "/srv/run.sh", "my-engine"),
    ],
    ids=["decode-layout", "prefill-layout", "named"],
)
def test_the_script_and_unit_read_are_the_entrys(
    tmp_path: Path, extra: dict[str, str], role: str, script: str, unit: str
) -> None:
    asked: list[list[str]] = []

    def systemctl(argv: list[str]) -> str:
        asked.append(argv)
        return "MainPID=0\nActiveState=failed\n"

    entry = spec("decode_no_drift", role=role, model=None, **extra)
    audit = export.audit_server(entry, HostFiles(root=str(tmp_path), run=systemctl), Recording("decode_no_drift"))
    assert asked == [["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "-p", "UnitFileState", unit]]
    assert audit.errors == [
        f"{script} does not exist: the server is not deployed here",
        f"{unit} has no main process (ActiveState=failed)",
    ]


INTERRUPTED = {
    "decode": {
        "envelope": {"context_length": 524288},
        "in_progress": {
            "since": "2025-01-02T03:04:05Z",
            "envelope": {"context_length": 65536},
            "release": "r2",
            "files": ["script"],
        },
    }
}
INTERRUPTED_WHY = (
    "interrupted deploy of context_length 524288 -> 65536, release r2, files script at 2025-01-02T03:04:05Z: "
    "rerun site.yml"
)


@pytest.mark.parametrize(
    ("facts_file", "written", "found"),
    [(None, FACTS, True), ("/srv/facts/sglang.fact", "/srv/facts/sglang.fact", True), ("", FACTS, False)],
    ids=["default", "named", "none"],
)
def test_an_interrupted_deploy_in_the_facts_is_drift(
    tmp_path: Path, facts_file: str | None, written: str, found: bool
) -> None:
    write(tmp_path, written, json.dumps(INTERRUPTED))
    entry = spec("decode_no_drift", model=None, **({} if facts_file is None else {"facts_file": facts_file}))
    audit = export.audit_server(entry, HostFiles(root=str(tmp_path)), Recording("decode_no_drift"))
    expected = [{"key": "deploy", "layer": "on_disk", "explanation": INTERRUPTED_WHY}]
    assert audit.drift == (expected if found else [])


@pytest.mark.parametrize(
    ("declared_context", "layer", "why"),
    [
        (65536, "running", "the files changed after the process started: restart the unit to apply them"),
        (
            524288,
            "on_disk",
            "edited on the host; the process still runs the declared value (a restart would apply the edit)",
        ),
    ],
    ids=["declared-as-edited", "declared-as-running"],
)
def test_an_edit_after_the_start_is_judged_on_both_layers(
    tmp_path: Path, ticks: None, declared_context: int, layer: str, why: str
) -> None:
    """The script's context length went 524288 -> 65536 after the process started (restart pending)."""
    case = next(p.values[0] for p in load_cases(LAYER_CASES) if p.id == "script_edited_after_start_is_restart_pending")
    host = build_host(tmp_path, case)
    declared = dict(yaml.safe_load(LAYER_CASES.read_text())["on_disk"]["decode"], context_length=declared_context)
    entry = spec("decode_no_drift", declared=declared, model=None)
    audit = export.audit_server(entry, host, Recording("decode_no_drift", require_key=SECRET))
    by_key = {d["key"]: d for d in audit.drift}
    assert by_key["context_length"] == {"key": "context_length", "layer": layer, "explanation": why}
    assert audit.ok and audit.errors == []


def test_an_interrupted_deploy_explains_the_running_drift(tmp_path: Path, ticks: None) -> None:
    """A deploy marker in the facts replaces the explanation of a running drift and is drift itself."""
    case = next(p.values[0] for p in load_cases(LAYER_CASES) if p.id == "script_edited_after_start_is_restart_pending")
    host = build_host(tmp_path, case)
    declared = dict(yaml.safe_load(LAYER_CASES.read_text())["on_disk"]["decode"], context_length=65536)
    entry = spec("decode_no_drift", declared=declared, model=None)
    write(tmp_path, FACTS, json.dumps(INTERRUPTED))
    audit = export.audit_server(entry, host, Recording("decode_no_drift", require_key=SECRET))
    by_key = {d["key"]: d for d in audit.drift}
    assert by_key["context_length"]["explanation"] == INTERRUPTED_WHY
    assert by_key["deploy"] == {"key": "deploy", "layer": "on_disk", "explanation": INTERRUPTED_WHY}


def test_file_metadata_and_leftover_backups_are_drift(tmp_path: Path) -> None:
    env = write(tmp_path, ENV, f"SGLANG_API_KEY={SECRET}\n", 0o600)
    write(tmp_path, ENV + ".1234.2025-01-02@03:04:05~", "old\n")
    host = HostFiles(root=str(tmp_path))
    have = host.owner(ENV)
    assert have is not None and env.exists()
    declared_files = {"env_file": {"owner": have["owner"], "group": have["group"], "mode": "0640"}}
    entry = spec("decode_no_drift", model=None, declared_files=declared_files)
    audit = export.audit_server(entry, host, Recording("decode_no_drift", require_key=SECRET))
    meta = f"{have['owner']}:{have['group']}"
    assert audit.drift == [
        {
            "key": "file:env_file",
            "layer": "on_disk",
            "explanation": f"{ENV} is {meta} 0600, the roles declare {meta} 0640 (mode differ): changed on the host "
            "or left by an interrupted rollback; rerun site.yml",
        },
        {
            "key": "backups",
            "layer": "on_disk",
            "explanation": "backup copies left by a deploy that did not finish (a finished deploy removes them once "
            "the server passed its gate): rerun site.yml",
        },
    ]


# ---------------------------------------------------------------- the textfile

HEAD_DRIFT = [
    "# HELP sglang_envelope_drift 1 for each envelope key that leaves the declaration, by the layer it starts on.",
    "# TYPE sglang_envelope_drift gauge",
]
HEAD_EFFECTIVE = [
    "# HELP sglang_envelope_effective The value the live engine applies, per envelope key (booleans 0/1).",
    "# TYPE sglang_envelope_effective gauge",
]
HEAD_TIMESTAMP = [
    "# HELP sglang_envelope_audit_timestamp_seconds When the drift exporter last audited the server.",
    "# TYPE sglang_envelope_audit_timestamp_seconds gauge",
]
HEAD_OK = [
    "# HELP sglang_envelope_audit_ok 1 when the live engine could be read.",
    "# TYPE sglang_envelope_audit_ok gauge",
]


def test_the_textfile_of_no_server_holds_only_the_families() -> None:
    text = export.exposition([], 1.5)
    assert text == "\n".join([*HEAD_DRIFT, *HEAD_EFFECTIVE, *HEAD_TIMESTAMP, *HEAD_OK]) + "\n"


def test_the_textfile_lists_every_server_sorted_deduplicated_and_escaped() -> None:
    decode = export.ServerAudit(
        "lab1:decode",
        ok=True,
        drift=[
            {"key": "tp_size", "layer": "running", "explanation": "a"},
            {"key": "bf16_index_k", "layer": "effective", "explanation": "b"},
            {"key": "tp_size", "layer": "running", "explanation": "again"},
            {"key": "tp_size", "layer": "on_disk", "explanation": "c"},
        ],
        effective={"tp_size": 4.0, "bf16_index_k": 0.0, "mem_fraction_static": 0.83, "context_length": 131072.0},
    )
    odd = export.ServerAudit('lab2:"pre\\fill"\nx', ok=False, drift=[{"key": "k", "layer": "declared"}])
    text = export.exposition([decode, odd], 1_700_000_000.25)
    odd_label = 'server="lab2:\\"pre\\\\fill\\"\\nx"'
    assert text.splitlines() == [
        *HEAD_DRIFT,
        'sglang_envelope_drift{server="lab1:decode",key="bf16_index_k",layer="effective"} 1',
        'sglang_envelope_drift{server="lab1:decode",key="tp_size",layer="on_disk"} 1',
        'sglang_envelope_drift{server="lab1:decode",key="tp_size",layer="running"} 1',
        "sglang_envelope_drift{" + odd_label + ',key="k",layer="declared"} 1',
        *HEAD_EFFECTIVE,
        'sglang_envelope_effective{server="lab1:decode",key="bf16_index_k"} 0.0',
        'sglang_envelope_effective{server="lab1:decode",key="context_length"} 131072.0',
        'sglang_envelope_effective{server="lab1:decode",key="mem_fraction_static"} 0.83',
        'sglang_envelope_effective{server="lab1:decode",key="tp_size"} 4.0',
        *HEAD_TIMESTAMP,
        'sglang_envelope_audit_timestamp_seconds{server="lab1:decode"} 1700000000.25',
        "sglang_envelope_audit_timestamp_seconds{" + odd_label + "} 1700000000.25",
        *HEAD_OK,
        'sglang_envelope_audit_ok{server="lab1:decode"} 1',
        "sglang_envelope_audit_ok{" + odd_label + "} 0",
    ]
    assert text.endswith("} 0\n") and not text.endswith("\n\n")


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [("plain", "plain"), ('a"b', 'a\\"b'), ("a\\b", "a\\\\b"), ("a\nb", "a\\nb"), ('\\"\n', '\\\\\\"\\n')],
)
def test_label_values_are_escaped_as_the_text_format_wants(raw: str, escaped: str) -> None:
    assert export._labels(server=raw, key="k") == '{server="' + escaped + '",key="k"}'


def test_the_textfile_is_written_beside_and_renamed_into_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new folder is made; the file appears whole, world-readable, and nothing else is left."""
    target = tmp_path / "a" / "b" / "drift.prom"
    renames: list[tuple[Path, Path, str, int]] = []
    real = os.replace

    def replace(src: str, dst: Path) -> None:
        renames.append((Path(src), Path(dst), Path(src).read_text(), os.stat(src).st_mode & 0o777))
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    export.write_atomically(target, "x 1\n")
    assert target.read_text() == "x 1\n" and target.stat().st_mode & 0o777 == 0o644
    [(src, dst, text, mode)] = renames
    assert (src.parent, src.name.startswith(".drift.prom."), dst, text, mode) == (
        target.parent,
        True,
        target,
        "x 1\n",
        0o644,
    )
    assert os.listdir(target.parent) == ["drift.prom"]

    export.write_atomically(target, "y 2\n")
    assert target.read_text() == "y 2\n" and os.listdir(target.parent) == ["drift.prom"]


def test_a_failed_write_leaves_the_old_textfile_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "drift.prom"
    target.write_text("old 1\n")
    with pytest.raises(UnicodeEncodeError):
        export.write_atomically(target, "bad \ud800\n")
    assert target.read_text() == "old 1\n" and os.listdir(tmp_path) == ["drift.prom"]


def test_a_failed_rename_raises_its_own_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Even when the temporary file is already gone, the rename's error is what the caller sees."""

    def replace(src: str, dst: Path) -> None:
        os.unlink(src)
        raise PermissionError(13, "synthetic: read-only folder")

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError, match="synthetic: read-only folder"):
        export.write_atomically(tmp_path / "drift.prom", "x 1\n")
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- the command line


def test_systemctl_is_run_checked_captured_as_text_with_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    runs: list[tuple[list[str], dict[str, Any]]] = []

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        runs.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, stdout="MainPID=7\n", stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    assert export._systemctl(["systemctl", "show", "u"]) == "MainPID=7\n"
    assert runs == [(["systemctl", "show", "u"], {"check": True, "capture_output": True, "text": True, "timeout": 30})]


def test_systemctl_output_and_failure_are_real() -> None:
    assert export._systemctl(["echo", "MainPID=7"]) == "MainPID=7\n"
    with pytest.raises(subprocess.CalledProcessError):
        export._systemctl(["false"])


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "[Errno 2] No such file or directory: '{path}'"),
        ("not json", "Expecting value: line 1 column 1 (char 0)"),
        ('{"textfile": "/x"}', "'servers'"),
        ('{"servers": []}', "'textfile'"),
    ],
    ids=["missing", "not-json", "no-servers", "no-textfile"],
)
def test_a_config_it_cannot_read_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str
) -> None:
    config = tmp_path / "drift.json"
    if content is not None:
        config.write_text(content)
    assert export.main(["--config", str(config)]) == 2
    out = capsys.readouterr()
    assert out.err == f"drift exporter: cannot read --config {config}: {reason.format(path=config)}\n"
    assert out.out == "" and os.listdir(tmp_path) == ([] if content is None else ["drift.json"])


def test_the_config_option_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        export.main([])
    assert done.value.code == 2
    assert capsys.readouterr().err.startswith("usage: sglang_drift_export.py [-h] --config CONFIG\n")


def test_the_help_names_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        export.main(["--help"])
    assert done.value.code == 0
    assert " ".join(capsys.readouterr().out.split()).endswith(
        "--config CONFIG JSON config written by the sglang_monitoring role"
    )


def test_a_run_audits_every_server_writes_the_textfile_and_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host is the root filesystem with systemctl; findings go to stdout, problems to stderr."""
    host = HostFiles(root=str(tmp_path))
    made: list[dict[str, Any]] = []

    def host_files(**kwargs: Any) -> HostFiles:
        made.append(kwargs)
        return host

    transports = {
        "http://127.0.0.1:30001": FixtureTransport(ENGINE_CASES["index_k_inferred_fp8_from_the_pool_is_drift"]["http"]),
        "http://127.0.0.1:30002": FixtureTransport(ENGINE_CASES["connection_refused"]["http"]),
    }

    class Routed:
        def get(self, url: str, headers: Mapping[str, str], timeout: float) -> Reply:
            return transports[url[:22]].get(url, headers, timeout)

    monkeypatch.setattr(export, "HostFiles", host_files)
    monkeypatch.setattr(export, "UrllibTransport", Routed)
    monkeypatch.setattr(export, "time", SimpleNamespace(time=lambda: 1_700_000_000.5))
    textfile = tmp_path / "out" / "sglang_drift.prom"
    servers = [spec(), spec(server="lab1:other", endpoint="http://127.0.0.1:30002", name="other")]
    config = write(tmp_path, "/etc/drift.json", json.dumps({"textfile": str(textfile), "servers": servers}))

    assert export.main(["--config", str(config)]) == 0
    assert made == [{"root": "/", "run": export._systemctl}]
    out = capsys.readouterr()
    assert out.out == f"lab1:decode: drift bf16_index_k (effective): {FP8_EXPLANATION}\n"
    refused = "unreachable ([Errno 111] Connection refused); nothing answers there: is the unit running?"
    assert out.err.splitlines() == [
        f"lab1:decode: {NOT_DEPLOYED}",
        f"lab1:other: {NOT_DEPLOYED}",
        *(
            f"lab1:other: other: GET http://127.0.0.1:30002{path}: {refused}"
            for path in ("/server_info", "/v1/models", "/v1/loads", "/metrics")
        ),
    ]
    lines = textfile.read_text().splitlines()
    assert 'sglang_envelope_drift{server="lab1:decode",key="bf16_index_k",layer="effective"} 1' in lines
    assert 'sglang_envelope_effective{server="lab1:decode",key="bf16_index_k"} 0.0' in lines
    assert lines[-8:] == [
        *HEAD_TIMESTAMP,
        'sglang_envelope_audit_timestamp_seconds{server="lab1:decode"} 1700000000.5',
        'sglang_envelope_audit_timestamp_seconds{server="lab1:other"} 1700000000.5',
        *HEAD_OK,
        'sglang_envelope_audit_ok{server="lab1:decode"} 1',
        'sglang_envelope_audit_ok{server="lab1:other"} 0',
    ]


def test_a_declaration_the_schema_refuses_is_named_as_declared(tmp_path: Path) -> None:
    declared = {**ENGINE_CASES["decode_no_drift"]["input"]["declared"], "bogus_key": 1}
    with pytest.raises(EnvelopeError, match=r"^declared\.bogus_key=1: not a known decode envelope key"):
        export.audit_server(
            spec("decode_no_drift", declared=declared), HostFiles(root=str(tmp_path)), Recording("decode_no_drift")
        )
