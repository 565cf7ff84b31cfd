"""The drift exporter: the four-layer audit of this host's engines, as a node_exporter textfile.

A systemd timer runs `python3 sglang_drift_export.py --config <file>` on every engine host, beside the part of the
collection's module_utils it imports (shipped under their own import name, sglang_closure.program_closure). It reads the
layers with the audit's own readers (sglang_layers.read_layers, sglang_engine_live.read_engine), judges them with the
audit's judge (sglang_drift.judge), and writes, atomically:

- `sglang_envelope_drift{server,key,layer} 1` for each drift item (severity drift; layer = where it starts);
- `sglang_envelope_effective{server,key}` for each numeric or boolean live value the engine applies;
- `sglang_envelope_audit_timestamp_seconds{server}` when the audit ran, and `sglang_envelope_audit_ok{server}`
  (0 when the engine could not be read: an unreadable engine is the engine-down alert's business).

The config file (JSON, written by the sglang_monitoring role) holds `textfile` and `servers`, each with `server`
(the label), `role`, `name`, `endpoint`, `declared`, `model` (the capacity-model inputs sglang_drift.judge takes),
`script`, `env_file` and `facts_file` (the server layout's), and optionally `unit`, `declared_files`, `timeout`.
It runs as root: /proc/<pid>/environ of the engine is the running layer. It never changes anything but the
textfile.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_drift import judge
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import read_engine
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_in
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Transport, UrllibTransport
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles, read_layers
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layout import UNIT_NAMES
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import normalize


@dataclass
class ServerAudit:
    server: str
    ok: bool
    drift: list[dict[str, Any]] = field(default_factory=list)
    effective: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def audit_server(spec: Mapping[str, Any], host: HostFiles, transport: Transport) -> ServerAudit:
    """The audit of one engine of this host: the audit role's readers, then its judge."""
    role, name = str(spec["role"]), str(spec.get("name") or spec["server"])
    env_file = str(spec["env_file"])
    layers = read_layers(
        role, str(spec.get("unit") or UNIT_NAMES[role]), str(spec["script"]), env_file, spec.get("facts_file"), host
    )
    declared = normalize(role, dict(spec["declared"]), "declared")
    live = read_engine(transport, str(spec["endpoint"]), role, api_key_in(host.read_text(env_file)),
                       float(spec.get("timeout", 10)), name)  # fmt: skip
    verdict = judge(role, declared, layers.snapshot(), live.snapshot(), spec.get("model"),
                    declared_files=spec.get("declared_files"))  # fmt: skip
    out = ServerAudit(str(spec["server"]), ok=live.engine is not None, errors=[*layers.problems, *live.errors])
    out.drift = [
        {"key": d.key, "layer": d.layer, "explanation": d.explanation} for d in verdict.drift if d.severity == "drift"
    ]
    for key, value in (verdict.effective or {}).items():
        if isinstance(value, bool):
            out.effective[key] = 1.0 if value else 0.0
        elif isinstance(value, int | float):
            out.effective[key] = float(value)
    return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def exposition(audits: Sequence[ServerAudit], now: float) -> str:
    """The textfile: one HELP/TYPE per family, then the samples of every server."""
    lines = [
        "# HELP sglang_envelope_drift 1 for each envelope key that leaves the declaration, by the layer it starts on.",
        "# TYPE sglang_envelope_drift gauge",
    ]
    for a in audits:
        for d in sorted({(d["key"], d["layer"]) for d in a.drift}):
            lines.append(f"sglang_envelope_drift{_labels(server=a.server, key=d[0], layer=d[1])} 1")
    lines += [
        "# HELP sglang_envelope_effective The value the live engine applies, per envelope key (booleans 0/1).",
        "# TYPE sglang_envelope_effective gauge",
    ]
    for a in audits:
        for key, value in sorted(a.effective.items()):
            lines.append(f"sglang_envelope_effective{_labels(server=a.server, key=key)} {value!r}")
    lines += [
        "# HELP sglang_envelope_audit_timestamp_seconds When the drift exporter last audited the server.",
        "# TYPE sglang_envelope_audit_timestamp_seconds gauge",
        *(f"sglang_envelope_audit_timestamp_seconds{_labels(server=a.server)} {now!r}" for a in audits),
        "# HELP sglang_envelope_audit_ok 1 when the live engine could be read.",
        "# TYPE sglang_envelope_audit_ok gauge",
        *(f"sglang_envelope_audit_ok{_labels(server=a.server)} {1 if a.ok else 0}" for a in audits),
    ]
    return "\n".join(lines) + "\n"


def write_atomically(path: Path, text: str) -> None:
    """node_exporter must never read half a file: write beside it, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _systemctl(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sglang_drift_export.py")
    parser.add_argument("--config", required=True, help="JSON config written by the sglang_monitoring role")
    args = parser.parse_args(argv)
    try:
        config = json.loads(Path(args.config).read_text())
        servers, textfile = config["servers"], Path(config["textfile"])
    except (OSError, ValueError, KeyError) as exc:
        print(f"drift exporter: cannot read --config {args.config}: {exc}", file=sys.stderr)
        return 2
    host, transport = HostFiles(root="/", run=_systemctl), UrllibTransport()
    audits = [audit_server(spec, host, transport) for spec in servers]
    write_atomically(textfile, exposition(audits, time.time()))
    for a in audits:
        for d in a.drift:
            print(f"{a.server}: drift {d['key']} ({d['layer']}): {d['explanation']}")
        for e in a.errors:
            print(f"{a.server}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
