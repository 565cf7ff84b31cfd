"""The on-disk and running layers of one server, read on its host with the flag codec.

On disk: the serve script's exec line, the environment file and the unit file (parsed back, never re-rendered).
Running: the argv and environment of the unit's MainPID from /proc. Programs that rewrite their process title
(smg calls setproctitle("smg::router"), which also overwrites the environment block) leave nothing to read
there; the running layer is then taken from the files, but only when none of them changed after the process
started. Secrets are redacted by the codec; the raw environment is never returned.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .sglang_flags import REDACTED, from_argv, from_environ, parse_env_file, parse_script
from .sglang_hostfs import ownership, sha1
from .sglang_records import backups_beside, deploy_marker, deployed_record, parse_facts, parse_switch
from .sglang_releases import releases_to_prune
from .sglang_schema import EnvelopeError, keys_for

UNIT_DIR = "/etc/systemd/system"


def parse_systemctl_show(text: str) -> dict[str, str]:
    """`systemctl show -p A -p B unit` output as a dict."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            out[name.strip()] = value.strip()
    return out


def parse_unit(text: str) -> dict[str, list[str]]:
    """ExecStart and EnvironmentFile entries of a unit file (the - prefix of optional files dropped)."""
    out: dict[str, list[str]] = {"ExecStart": [], "EnvironmentFile": []}
    for raw in text.replace("\\\n", " ").splitlines():
        name, sep, value = raw.strip().partition("=")
        if sep and name.strip() in out and value.strip():
            out[name.strip()].append(" ".join(value.split()).lstrip("-@+!:"))
    return out


def on_disk_envelope(role: str, script_text: str | None, env_text: str | None) -> dict[str, Any]:
    """The envelope the files on the host would start: script argv plus environment file."""
    envelope: dict[str, Any] = {}
    if script_text is not None:
        envelope.update(from_argv(role, parse_script(script_text)))
    if env_text is not None:
        envelope.update({k: v for k, v in from_environ(role, parse_env_file(env_text)).items() if v is not None})
    return envelope


def split_nul(raw: bytes) -> list[str]:
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def running_envelope(role: str, cmdline: bytes, environ: bytes) -> dict[str, Any] | None:
    """The envelope of a live process, or None when its argv holds no flag (process title rewritten)."""
    argv = split_nul(cmdline)
    if not any(token.startswith("--") for token in argv):
        return None
    envelope = from_argv(role, argv)
    env: dict[str, str] = {}
    for item in split_nul(environ):  # the first of a repeated name wins, as getenv(3) reads it
        name, _sep, value = item.partition("=")
        env.setdefault(name, value)
    if env:
        envelope.update({k: v for k, v in from_environ(role, env).items() if v is not None})
    return envelope


def proc_start_epoch(stat_text: str, boot_time: float, ticks: int) -> float:
    """Start time (epoch seconds) of a process from /proc/<pid>/stat."""
    fields = stat_text[stat_text.rindex(")") + 2 :].split()
    return boot_time + int(fields[19]) / ticks  # field 22 (starttime); fields here start at field 3


def boot_time(proc_stat_text: str) -> float:
    for line in proc_stat_text.splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise ValueError("no btime line in /proc/stat")


def redact_facts(value: Any) -> Any:
    """Local facts with every secret key's value replaced by the redaction marker."""
    secrets = {k.name for role in ("prefill", "decode", "router") for k in keys_for(role) if k.secret}
    if isinstance(value, dict):
        return {k: (REDACTED if k in secrets and v is not None else redact_facts(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_facts(v) for v in value]
    return value


@dataclass
class HostFiles:
    """Filesystem and command access, replaceable in tests."""

    root: str = "/"
    run: Callable[[list[str]], str] | None = None

    def path(self, path: str) -> Path:
        return Path(self.root) / path.lstrip("/")

    def read_text(self, path: str) -> str | None:
        try:
            return self.path(path).read_text()
        except FileNotFoundError:
            return None

    def read_bytes(self, path: str) -> bytes | None:
        try:
            return self.path(path).read_bytes()
        except (FileNotFoundError, ProcessLookupError):
            return None

    def sha1(self, path: str) -> str | None:
        return sha1(self.path(path))

    def mtime(self, path: str) -> float | None:
        try:
            return self.path(path).stat().st_mtime
        except FileNotFoundError:
            return None

    def owner(self, path: str) -> dict[str, str] | None:
        """{owner, group, mode} of a file (names where the host knows them, mode as 4 octal digits), or None."""
        try:
            st = self.path(path).stat()
        except FileNotFoundError:
            return None
        return ownership(st)

    def backups(self, path: str) -> list[str]:
        """Template backups beside `path` (sglang_records.backups_beside), as paths on the host."""
        return backups_beside(path, self.root)


def release_leftovers(host: HostFiles, releases_dir: str, keep: int) -> list[str]:
    """Releases under `releases_dir` the release manager would remove (sglang_releases.releases_to_prune): not the
    target of the `current` or `previous` link beside it and not among the newest `keep` complete ones."""
    root = host.path(releases_dir)
    try:
        dirs = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    linked = [Path(os.readlink(link)).name for link in (root.parent / "current", root.parent / "previous")
              if link.is_symlink()]  # fmt: skip
    releases = {p.name: (p.stat().st_mtime, (p / "manifest.json").is_file()) for p in dirs}
    return [str(Path(releases_dir) / name) for name in releases_to_prune(releases, linked, keep)]


@dataclass
class Layers:
    """Result of reading one server's files and process."""

    on_disk: dict[str, Any] | None = None
    running: dict[str, Any] | None = None
    running_source: str = "unknown"  # proc | files | unknown
    unit: dict[str, Any] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)
    deployed: dict[str, Any] | None = None
    in_progress: dict[str, Any] | None = None  # the marker of a deploy that has not finished (local facts)
    backups: list[str] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)  # releases the deploy would not keep
    release_switch: dict[str, Any] | None = None  # an engine release switch that has not finished
    cpus: int | None = None  # smg derives its default in-flight cap from the host's cores
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def snapshot(self) -> dict[str, Any]:
        """The host side of one server as the judge (sglang_drift.judge) and the report take it."""
        out = asdict(self)
        out["restart_pending"] = bool(self.unit.get("changed_since_start"))
        out["edited_since_deploy"] = sorted(n for n, f in self.files.items() if f.get("edited_since_deploy"))
        return out


def read_layers(
    role: str,
    unit: str,
    script: str,
    env_file: str,
    facts_file: str | None,
    host: HostFiles,
    ticks: int | None = None,
    unit_dir: str = UNIT_DIR,
    releases_dir: str | None = None,
    keep_releases: int = 3,
    release_fact_file: str | None = None,
) -> Layers:
    """Read the on-disk and running layers of one server on this host; with `releases_dir` (an engine), also the
    releases the deploy would not keep and, with `release_fact_file`, an unfinished release switch."""
    out = Layers(cpus=os.cpu_count())
    script_text, env_text = host.read_text(script), host.read_text(env_file)
    out.files = {
        "script": {"path": script, "exists": script_text is not None, "mtime": host.mtime(script)},
        "env_file": {"path": env_file, "exists": env_text is not None, "mtime": host.mtime(env_file)},
    }
    unit_path = f"{unit_dir.rstrip('/')}/{unit}.service"
    unit_text = host.read_text(unit_path)
    out.files["unit"] = {"path": unit_path, "exists": unit_text is not None, "mtime": host.mtime(unit_path)}
    for info in out.files.values():
        meta = host.owner(info["path"])
        if meta is not None:
            info.update(meta)
        out.backups += host.backups(info["path"])
    try:
        out.on_disk = on_disk_envelope(role, script_text, env_text) if script_text is not None else None
    except EnvelopeError as exc:
        out.problems.append(f"{script}: {exc}")
    if script_text is None:
        out.problems.append(f"{script} does not exist: the server is not deployed here")
    if unit_text is not None:
        parsed = parse_unit(unit_text)
        exec_start = " ".join(parsed["ExecStart"])
        out.unit = {
            "exec_start": exec_start,
            "environment_files": parsed["EnvironmentFile"],
            "runs_script": script in exec_start,
            "reads_env_file": env_file in parsed["EnvironmentFile"],
        }
        if not out.unit["runs_script"]:
            out.problems.append(f"{unit_path}: ExecStart does not run {script}")
        if env_text is not None and not out.unit["reads_env_file"]:
            out.problems.append(f"{unit_path}: no EnvironmentFile={env_file}")
    if facts_file:
        _read_facts(out, role, facts_file, host)
    if releases_dir:
        out.releases = release_leftovers(host, releases_dir, keep_releases)
        out.release_switch = parse_switch(host.read_text(release_fact_file)) if release_fact_file else None
    _read_process(out, role, unit, host, ticks or os.sysconf("SC_CLK_TCK"))
    return out


def _read_facts(out: Layers, role: str, facts_file: str, host: HostFiles) -> None:
    raw = host.read_text(facts_file)
    if raw is None:
        out.notes.append(f"{facts_file} does not exist: deployed envelope unknown")
        return
    facts = parse_facts(raw)
    if facts is None:
        out.notes.append(f"{facts_file} is not a JSON object: deployed envelope unknown")
        return
    envelope, sums = deployed_record(redact_facts(facts), role)
    out.deployed = envelope
    marker = deploy_marker(facts, role)
    out.in_progress = redact_facts(marker) if marker is not None else None
    for name, info in out.files.items():
        if name in sums:
            info["edited_since_deploy"] = host.sha1(info["path"]) != sums[name]


def _read_process(out: Layers, role: str, unit: str, host: HostFiles, ticks: int) -> None:
    if host.run is None:
        out.notes.append("no systemctl access: running layer unknown")
        return
    show = parse_systemctl_show(
        host.run(["systemctl", "show", "-p", "MainPID", "-p", "ActiveState", "-p", "UnitFileState", unit])
    )
    pid = int(show.get("MainPID") or 0)
    out.unit.update({"active_state": show.get("ActiveState"), "enabled": show.get("UnitFileState"), "main_pid": pid})
    if pid <= 0:
        out.problems.append(f"{unit} has no main process (ActiveState={show.get('ActiveState')})")
        return
    cmdline = host.read_bytes(f"/proc/{pid}/cmdline") or b""
    environ = host.read_bytes(f"/proc/{pid}/environ") or b""
    stat, proc_stat = host.read_text(f"/proc/{pid}/stat"), host.read_text("/proc/stat")
    started = proc_start_epoch(stat, boot_time(proc_stat), ticks) if stat and proc_stat else None
    out.unit["started"] = started
    changed = [
        name
        for name, info in out.files.items()
        if started is not None and info.get("mtime") is not None and info["mtime"] > started
    ]
    out.unit["changed_since_start"] = changed
    running = running_envelope(role, cmdline, environ)
    if running is not None:
        out.running, out.running_source = running, "proc"
        return
    if changed or started is None or out.on_disk is None:
        if changed:
            why = f"{', '.join(changed)} changed after the process started"
        else:
            why = "start time unknown" if started is None else "no files to read the values from"
        out.notes.append(f"the process title is rewritten (no argv in /proc/{pid}/cmdline) and {why}")
        return
    out.running, out.running_source = dict(out.on_disk), "files"
    out.notes.append(
        f"the process title is rewritten (no argv in /proc/{pid}/cmdline): running values are the files' "
        "values, which did not change after the process started"
    )
