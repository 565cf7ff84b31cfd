"""Ship a small Python program to a verified host, run it there with the host's python3, read its JSON.

The engines and the router may listen on loopback only (the lab hosts live in their own network namespace),
so every HTTP check runs on the host itself. One SSH round trip collects everything (hostside/snapshot.py);
the envelope probe (probes/envelope_probe.py) is a second one. Each ships as a zipapp with the core modules it
imports (program_archive). Nothing is left on the host.
"""

from __future__ import annotations

import base64
import io
import ipaddress
import json
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_closure import PACKAGE, program_closure
from verify_expect import REPO, HostPlan

HERE = Path(__file__).resolve().parent
MODULE_UTILS = REPO / "collections/ansible_collections/sglang/dsv4/plugins/module_utils"
SNAPSHOT = HERE / "hostside" / "snapshot.py"
PROBE = HERE / "probes" / "envelope_probe.py"


class RemoteError(AssertionError):
    """The program did not run on the host, or printed no JSON."""


@dataclass(frozen=True)
class Outcome:
    rc: int
    data: dict[str, Any]
    stderr: str


def program_archive(program: Path) -> bytes:
    """A zipapp: __main__ (the program: the snapshot or a probe) plus the project's core modules it needs on the
    host (stdlib only; the closure of its imports), under their own import name (PACKAGE)."""
    buf = io.BytesIO()
    folder = PACKAGE.replace(".", "/")
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__main__.py", program.read_text())
        # zipimport needs a regular package at every level.
        parts = folder.split("/")
        for depth in range(1, len(parts) + 1):
            zf.writestr("/".join(parts[:depth]) + "/__init__.py", "")
        for name in program_closure(program):
            zf.writestr(f"{folder}/{name}.py", (MODULE_UTILS / f"{name}.py").read_text())
    return buf.getvalue()


def run_program(host: Any, payload: bytes, suffix: str, args: list[str], python: str, limit_s: int) -> Outcome:
    """Copy `payload` to a temporary file on the host, run it with `python args`, remove it, parse stdout."""
    blob = base64.b64encode(payload).decode()
    quoted = " ".join(shlex.quote(a) for a in args)
    script = (
        f"t=$(mktemp /tmp/sglang-verify.XXXXXX{suffix}) || exit 90; "
        f"trap 'rm -f \"$t\"' EXIT; "
        f'printf %s {blob} | base64 -d > "$t" || exit 91; '
        f'timeout -k 5 {int(limit_s)} {shlex.quote(python)} "$t" {quoted}'
    )
    result = host.run(script)
    try:
        data = json.loads(result.stdout)
    except ValueError:
        raise RemoteError(
            f"{suffix} program on the host exited {result.rc} without JSON; "
            f"stderr: {result.stderr.strip()[-2000:]}; stdout: {result.stdout.strip()[-500:]}"
        ) from None
    return Outcome(result.rc, data, result.stderr)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def snapshot_spec(plan: HostPlan, gpu: bool) -> dict[str, Any]:
    servers = []
    for s in plan.servers.values():
        item: dict[str, Any] = {
            "role": s.role,
            "unit": s.unit,
            "script": s.script,
            "env_file": s.env_file,
            "unit_file": s.unit_file,
            "base_url": s.base_url,
            "health_url": s.health_url,
        }
        servers.append(item)
    addresses = {a for s in plan.servers.values() for a, _ in s.listeners}
    return {
        "paths": sorted(plan.files()),
        "resolve": sorted(a for a in addresses if a != "*" and not _is_ip(a)),
        "servers": servers,
        "facts_file": plan.fact_file,
        "timeout": float(plan.settings["sglang_verify_http_timeout"]),
        "gpu": gpu,
        "current_link": plan.current_link,
    }


def take_snapshot(host: Any, plan: HostPlan) -> dict[str, Any]:
    spec = snapshot_spec(plan, gpu=True)
    python = plan.settings["sglang_verify_python"]
    out = run_program(host, program_archive(SNAPSHOT), ".pyz", [json.dumps(spec)], python, 120)
    if out.rc != 0:
        raise RemoteError(f"snapshot exited {out.rc}: {out.stderr.strip()[-2000:]}")
    return out.data


def run_probe(host: Any, plan: HostPlan, config: dict[str, Any]) -> dict[str, Any]:
    limit = int(config["deadline_s"]) + int(config.get("idle_wait_s", 0)) + 15
    python = plan.settings["sglang_verify_python"]
    out = run_program(host, program_archive(PROBE), ".pyz", [json.dumps(config)], python, limit)
    if out.rc not in (0, 1):
        raise RemoteError(f"probe exited {out.rc}: {out.stderr.strip()[-2000:]}")
    return out.data
