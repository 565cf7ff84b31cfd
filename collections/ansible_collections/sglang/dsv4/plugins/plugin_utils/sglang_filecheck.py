"""Every file playbooks/render.yml rendered, checked on the controller by the program that will read it.

Each render task records, beside a host's files, the command that checks each file on its host (the same command the
deploy's `validate:` runs, `%s` standing for the file) and what the checker may name in it mapped to the declared
variable (.sglang-checks.json, written by the sglang_render_files action). Here each command runs on a copy of the
rendered file on the controller, before any host is touched:

- `haproxy -c -f`: the whole HAProxy configuration (HAProxy 2.6 reads a bare number as milliseconds; any unit is
  accepted, so a plausible unit is the rule table's business, not the parser's);
- `keepalived -t -f`: the VRRP configuration. keepalived 2.2.7 refuses an interface the machine lacks, so the copy
  names one of the controller's own non-loopback interfaces; the interface name itself is checked on the front host
  (its deploy runs keepalived -t there). Any line keepalived prints about the file is a refusal: it ignores an unknown
  keyword with exit status 0;
- `promtool check config --syntax-only` and `promtool check rules`; `amtool check-config`;
- `systemd-analyze verify`: all units of a host together, so their After=/Wants= between each other resolve. Every
  directive, its value and the sandbox directives are parsed by systemd 252; an executable an Exec line names is
  replaced in the copy by an empty script of the controller (it exists only on the host, where the preflight runs the
  unit's command under its user and sandbox). "Unknown key", "Failed to parse" and any other line that ends
  ", ignoring: <value>" (a soft resource limit above the hard one) are refusals: systemd ignores such a directive and
  starts the unit without it.

A checker missing on the controller is reported as such (the host-side check still runs during the deploy). Each
verdict is cached under cache_dir by the sha256 digest of the command, the files it read and the checker's version.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECKS_FILE = ".sglang-checks.json"  # plugins/action/sglang_render_files.py
SYSTEMD = "systemd-analyze"
UNIT_CHECK = f"{SYSTEMD} verify %s"
UNIT_SUFFIXES = (".service", ".timer", ".socket", ".path", ".target")
EXEC_LINE = re.compile(r"^(Exec[A-Za-z]*=)([-@:+!]*)(\S+)(.*)$")
INTERFACE_LINE = re.compile(r"^(\s*interface\s+)(\S+)(.*)$")
# The packages that give each program on a Debian controller (Makefile APT_PACKAGES).
PACKAGES = {
    "haproxy": "haproxy",
    "keepalived": "keepalived",
    "promtool": "prometheus",
    "amtool": "prometheus-alertmanager",
    SYSTEMD: "systemd",
}
VERSION_ARGS = {"haproxy": ["-v"], "keepalived": ["-v"], "promtool": ["--version"], "amtool": ["--version"]}
# Lines a program prints while accepting the file: HAProxy's notices about itself, promtool's and amtool's summary.
QUIET = re.compile(r"^\[NOTICE\]|^\s*$")


@dataclass
class Check:
    """One command over one or more rendered files of one host."""

    host: str
    program: str
    command: str  # as recorded, %s standing for the file(s)
    files: list[tuple[str, Path]]  # (path on the host, rendered copy)
    declared: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.host}: {self.command.replace('%s', ' '.join(p for p, _r in self.files))}"


def read_checks(render_dir: Path) -> list[Check]:
    """The checks recorded under each host's directory; a host's units form one systemd-analyze check."""
    checks: list[Check] = []
    for manifest in sorted(render_dir.glob(f"*/{CHECKS_FILE}")):
        host_dir = manifest.parent
        units: Check | None = None
        for path, spec in sorted(json.loads(manifest.read_text()).items()):
            command = str(spec["check"])
            program = shlex.split(command)[0]
            copy = host_dir / path.lstrip("/")
            declared = {str(k): str(v) for k, v in (spec.get("declared") or {}).items()}
            if program != SYSTEMD:
                checks.append(Check(host_dir.name, program, command, [(path, copy)], declared))
                continue
            if units is None:
                units = Check(host_dir.name, program, command, [])
                checks.append(units)
            units.files.append((path, copy))
            units.declared.update(declared)
    return checks


def version(program: str) -> str | None:
    """The checker's version line (a cache key part), or None when the program is not on the controller."""
    found = shutil.which(program) or shutil.which(program, path="/usr/sbin:/sbin")
    if not found:
        return None
    args = VERSION_ARGS.get(program, ["--version"])
    try:
        done = subprocess.run([found, *args], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = (done.stdout or done.stderr).strip().splitlines()
    return f"{found} {text[0] if text else ''}"


def digest(check: Check, checker_version: str) -> str:
    """sha256 of the command, each file's path and content, and the checker's version."""
    sha = hashlib.sha256()
    sha.update(json.dumps([check.command, checker_version]).encode())
    sha.update(hashlib.sha256(Path(__file__).read_bytes()).digest())  # how the copy is staged
    for path, copy in check.files:
        sha.update(path.encode() + b"\0")
        sha.update(hashlib.sha256(copy.read_bytes()).digest())
    return sha.hexdigest()


def _stub_execs(text: str, stub: str) -> str:
    """A unit's text with each Exec line's program replaced by `stub` (same lines, so line numbers hold)."""
    return "\n".join(EXEC_LINE.sub(lambda m: f"{m[1]}{m[2]}{stub}{m[4]}", line) for line in text.split("\n"))


def _controller_interface() -> str | None:
    names = sorted(p.name for p in Path("/sys/class/net").glob("*") if p.name != "lo")
    return names[0] if names else None


def _controller_interface_named(text: str) -> str:
    """keepalived's text with each `interface` line naming an interface the controller has."""
    iface = _controller_interface()
    if not iface:
        return text
    return "\n".join(INTERFACE_LINE.sub(rf"\g<1>{iface}\g<3>", line) for line in text.split("\n"))


def _stage(check: Check, work: Path) -> tuple[list[str], dict[str, str]]:
    """The copies the program reads (in `work`), and each copy's path mapped back to the path on the host."""
    staged: list[str] = []
    back: dict[str, str] = {}
    stub = work / "exec-stub"
    if check.program == SYSTEMD and not stub.exists():
        stub.write_text("#!/bin/sh\n")
        stub.chmod(0o755)
    for index, (path, copy) in enumerate(check.files):
        text = copy.read_text()
        if check.program == SYSTEMD:
            text = _stub_execs(text, str(stub))
        elif check.program == "keepalived":
            text = _controller_interface_named(text)
        # A unit keeps its name (systemd reads the unit's name from it); the others get a folder each.
        target = work / (Path(path).name if check.program == SYSTEMD else f"{index}-{Path(path).name}")
        target.write_text(text)
        staged.append(str(target))
        back[str(target)] = path
    return staged, back


def _argv(check: Check, staged: list[str]) -> list[str]:
    words = shlex.split(check.command)
    if check.program == SYSTEMD:
        # Man pages and generators are the controller's, not the host's.
        return [words[0], *[w for w in words[1:] if w != "%s"], "--man=no", "--generators=no", *staged]
    return [staged[0] if w == "%s" else w for w in words]


def _refusal_lines(check: Check, out: str, staged: Mapping[str, str]) -> list[str]:
    """What the program said against the file(s), with the controller's copies named by their host paths."""
    lines = []
    for line in out.splitlines():
        for copy, path in staged.items():
            line = line.replace(copy, path).replace(Path(copy).name, Path(path).name)
        if QUIET.search(line):
            continue
        if check.program == SYSTEMD and not any(w in line for w in ("Unknown ", "Failed to ", "not ", ", ignoring")):
            continue
        lines.append(line.strip())
    return lines


def run_check(check: Check) -> dict[str, Any]:
    """{ok, said}: the program's verdict on the rendered file(s) and, when it refuses, what it said."""
    with tempfile.TemporaryDirectory(prefix="sglang-filecheck-") as tmp:
        staged, back = _stage(check, Path(tmp))
        done = subprocess.run(_argv(check, staged), capture_output=True, text=True, check=False, timeout=120)
        said = _refusal_lines(check, f"{done.stdout}\n{done.stderr}", back)
    if check.program in ("promtool", "amtool") and done.returncode == 0:
        said = []  # their summary ("SUCCESS: ...", "Checking ...") is not a refusal
    if check.program == "haproxy" and done.returncode == 0:
        said = [line for line in said if "[ALERT]" in line]
    return {"ok": done.returncode == 0 and not said, "said": said[-12:], "rc": done.returncode}


def _culprits(check: Check, said: list[str]) -> list[str]:
    """The declared variables behind what the program named: the directive that starts each rendered line it cites,
    or a key it quotes; the longest key wins (`timeout server` is not `server`)."""
    rendered = {path: copy.read_text().split("\n") for path, copy in check.files}
    keys = sorted(check.declared, key=len, reverse=True)
    named: list[str] = []

    def take(text: str, pattern: str) -> None:
        for key in keys:
            if re.search(pattern.format(key=re.escape(key)), text):
                text = text.replace(key, "")
                if check.declared[key] not in named:
                    named.append(check.declared[key])

    for line in said:
        for path, lines in rendered.items():
            for match in re.finditer(rf"{re.escape(path)}(?::|: Line )(\d+)", line):
                if 0 < int(match[1]) <= len(lines):
                    take(lines[int(match[1]) - 1], r"^\s*{key}(\s|=|$)")
        take(line, r"(^|[\s'\"(]){key}(['\"]|\s'|$)")
    return named


def problem(check: Check, verdict: Mapping[str, Any]) -> str:
    """The refusal as a validation problem: the host, the file, the declared variables behind it, the program's own
    words, and the fix."""
    said = verdict.get("said") or [f"exit status {verdict.get('rc')}"]
    named = _culprits(check, said)
    files = ", ".join(p for p, _c in check.files)
    who = " and ".join(named) if named else "the declared variables rendered into it"
    return (
        f"{check.host}: {files} as rendered from {who} is refused by {check.command.split()[0]} on the controller "
        f"({check.command.replace('%s', 'FILE')}): {' | '.join(said)}; fix: change {who} so that "
        f"{check.program} accepts the file"
    )


def check_rendered(render_dir: str | Path, cache_dir: str | Path | None = None) -> dict[str, Any]:
    """{problems, ran, missing, stats} of every recorded check under render_dir.

    ran: one line per check (`checker on files: ok|refused|cached`); missing: one line per program absent here."""
    started = time.monotonic()
    checks = read_checks(Path(render_dir))
    versions = {program: version(program) for program in sorted({c.program for c in checks})}
    problems: list[str] = []
    ran: list[str] = []
    cached = 0
    for check in checks:
        checker = versions[check.program]
        if checker is None:
            continue
        key = digest(check, checker)
        hit_path = Path(cache_dir) / f"{key}.json" if cache_dir else None
        verdict: dict[str, Any] | None = None
        if hit_path is not None and hit_path.is_file():
            try:
                verdict = json.loads(hit_path.read_text())
            except ValueError:
                verdict = None
        was_cached = verdict is not None
        if verdict is None:
            verdict = run_check(check)
            if hit_path is not None:
                hit_path.parent.mkdir(parents=True, exist_ok=True)
                partial = hit_path.with_name(f".{key}.{os.getpid()}")
                partial.write_text(json.dumps(verdict, sort_keys=True))
                os.replace(partial, hit_path)
        cached += was_cached
        state = "ok" if verdict["ok"] else "refused"
        ran.append(f"{check.label}: {state}{' (cached verdict)' if was_cached else ''}")
        if not verdict["ok"]:
            problems.append(problem(check, verdict))
    missing = [
        f"{program} is not on the controller (Debian package {PACKAGES.get(program, program)}; fix: `make apt`): "
        f"{sum(c.program == program for c in checks)} rendered file(s) left to the check on their host during the "
        "deploy"
        for program, found in versions.items()
        if found is None
    ]
    stats = {"checks": len(checks), "cached": cached, "seconds": round(time.monotonic() - started, 1)}
    return {"problems": problems, "ran": ran, "missing": missing, "stats": stats}
