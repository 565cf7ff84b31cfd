"""plugins/modules/sglang_layers_info.py against hosts built under a temporary root (cases in the .yaml file)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import (
    HostFiles,
    parse_systemctl_show,
    parse_unit,
    running_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import file_names
from audit_helpers import SECRET, load_cases, load_library, run_module, subset

CASES = Path(__file__).with_suffix(".yaml")
BOOT, START_TICKS, TICKS = 1_700_000_000, 100_000, 100
BEFORE, AFTER = BOOT + 500, BOOT + 2_000  # the process starts at BOOT + 1000
layers = load_library("sglang_layers_info")


def _write(root: Path, path: str, data: bytes | str, mtime: float | None = None) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        target.write_text(data)
    else:
        target.write_bytes(data)
    if mtime is not None:
        os.utime(target, (mtime, mtime))


# Where the cases put the files: the production places (the sglang_defaults role's defaults).
PLACES = {"bin_dir": "/opt/sglang/bin", "env_dir": "/etc/sglang", "unit_dir": "/etc/systemd/system"}
FACTS = "/etc/ansible/facts.d/sglang.fact"


def layout_args(role: str, facts: bool = True) -> dict[str, str]:
    """The module's script, env_file and facts_file options for `role` under PLACES (no facts: an empty path)."""
    names = file_names(role, PLACES)
    return {"script": names["script"], "env_file": names["env_file"], "facts_file": FACTS if facts else ""}


def build_host(root: Path, case: dict[str, Any]) -> HostFiles:
    for path, spec in case["files"].items():
        text = spec["text"]
        for old, new in (spec.get("replace") or {}).items():
            assert old in text, f"{case['id']}: {old!r} not in {path}"
            text = text.replace(old, new)
        _write(root, path, text, AFTER if spec.get("after_start") else BEFORE)
    if "facts" in case:
        facts = json.loads(json.dumps(case["facts"]))
        for record in facts.values():
            for entry in (record.get("files") or {}).values():
                entry["sha1"] = hashlib.sha1(entry.pop("sha1_of").encode()).hexdigest()
        _write(root, "/etc/ansible/facts.d/sglang.fact", json.dumps(facts))
    proc = case["process"]
    pid = int(proc["pid"])
    if pid:
        argv = [proc["title"]] if "title" in proc else proc["argv"]
        environ = {} if "title" in proc else proc.get("environ", {})
        _write(root, f"/proc/{pid}/cmdline", b"\0".join(a.encode() for a in argv) + b"\0" * 64)
        _write(root, f"/proc/{pid}/environ", b"".join(f"{k}={v}\0".encode() for k, v in environ.items()))
        _write(root, f"/proc/{pid}/stat", f"{pid} (python3) S " + "0 " * 18 + f"{START_TICKS} 0 0\n")
    _write(root, "/proc/stat", f"cpu  1 2 3 4\nbtime {BOOT}\n")
    state = proc.get("active_state", "active")

    def systemctl(argv: list[str]) -> str:
        assert argv[:2] == ["systemctl", "show"], argv
        return f"MainPID={pid}\nActiveState={state}\n"

    return HostFiles(root=str(root), run=systemctl)


@pytest.mark.parametrize("case", load_cases(CASES))
def test_case(case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sysconf", lambda name: TICKS if name == "SC_CLK_TCK" else os.sysconf(name))
    args = {**layout_args(case["input"]["role"], facts="facts" in case), **case["input"]}
    result = run_module(layers, args, host=build_host(tmp_path, case))
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    problems = list(subset(case["output"], result))
    assert not problems, "\n".join(problems) + "\n" + json.dumps(result, indent=1)
    for layer, keys in (case.get("absent_keys") or {}).items():
        assert not set(keys) & set(result[layer] or {}), (layer, result[layer])
    text = json.dumps(result)
    assert SECRET not in text and "sk-should-never-be-here" not in text, "a secret leaked into the result"


def test_systemctl_show_and_unit_parsing() -> None:
    assert parse_systemctl_show("MainPID=12\nActiveState=active\nbad line\n") == {
        "MainPID": "12",
        "ActiveState": "active",
    }
    unit = parse_unit("[Service]\nEnvironmentFile=-/etc/a.env\nExecStart=/opt/x.sh \\\n  --flag\n")
    assert unit == {"ExecStart": ["/opt/x.sh --flag"], "EnvironmentFile": ["/etc/a.env"]}


def test_running_envelope_redacts_the_key_and_ignores_other_variables() -> None:
    argv = b"sglang\0serve\0--api-key\0" + SECRET.encode() + b"\0--port\x0030001\0"
    environ = f"SGLANG_API_KEY={SECRET}\0HOME=/root\0".encode()
    assert running_envelope("decode", argv, environ) == {"api_key": "<redacted>", "port": 30001, "bf16_index_k": False}
    assert running_envelope("router", b"smg::router\0\0\0", b"") is None
