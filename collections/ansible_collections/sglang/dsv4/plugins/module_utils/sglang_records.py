"""The deploy's records on a host: their formats, and the one writer and reader of each.

- The facts record (`sglang.fact`, Ansible local facts): {server: {unit, release, command, envelope, files}}, what
  each server last passed its health gate with. While a server's deploy has not finished, its record also holds
  `in_progress: {since, envelope, release, files}`: written before any of its files changes, gone once the record
  is written after the gate, or put back by a rollback.
- The release-switch record (`sglang_release.fact`): {in_progress: {to, from, since}}, written before an engine
  release is unpacked or linked, removed once every engine of the host recorded that release, or a rollback put the
  previous one back.
- Template backups: Ansible's `<file>.<pid>.<date>~` beside each server file, removed once the server passed its
  gate.

The module sglang_deploy_records writes and clears them; sglang_host_info and sglang_layers read them through here.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

UNREADABLE_SWITCH = {"to": None, "from": None, "since": None, "unreadable": True}


def record_text(record: Mapping[str, Any]) -> str:
    """A record as written: stable JSON (sorted keys; the facts record holds no time), so a rerun writes the same
    bytes."""
    return json.dumps(record, indent=2, sort_keys=True) + "\n"


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def marked(deployed: Mapping[str, Any], server: str, marker: Mapping[str, Any], since: str) -> dict[str, Any]:
    """`deployed` with `server`'s deploy marked in progress ({envelope, release, files} since `since`)."""
    record = dict(deployed.get(server) or {})
    record["in_progress"] = {**marker, "since": since}
    return {**deployed, server: record}


def switch_record(to: str, previous: str | None, since: str) -> dict[str, Any]:
    """The release-switch record."""
    return {"in_progress": {"to": to, "from": previous, "since": since}}


def parse_facts(raw: str | None) -> dict[str, Any] | None:
    """The facts record from its text: None when the file is missing, not JSON or not a mapping."""
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def parse_switch(raw: str | None) -> dict[str, Any] | None:
    """The unfinished release switch ({to, from, since}) from the record's text, None without one; a record that
    cannot be read is reported as UNREADABLE_SWITCH."""
    try:
        marker = json.loads(raw).get("in_progress") if raw else None
    except (ValueError, AttributeError):
        return dict(UNREADABLE_SWITCH)
    return dict(marker) if isinstance(marker, dict) else None


def server_record(facts: Any, server: str) -> dict[str, Any] | None:
    record = facts.get(server) if isinstance(facts, dict) else None
    return record if isinstance(record, dict) else None


def deployed_record(facts: Any, server: str) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(envelope, {file: sha1}) of what `server` last passed its gate with."""
    record = server_record(facts, server) or {}
    envelope, files = record.get("envelope"), record.get("files")
    entries: dict[str, Any] = files if isinstance(files, dict) else {}
    sums = {name: str(f["sha1"]) for name, f in entries.items() if isinstance(f, dict) and f.get("sha1")}
    return (dict(envelope) if isinstance(envelope, dict) else None), sums


def deploy_marker(facts: Any, server: str) -> dict[str, Any] | None:
    """The in-progress marker of `server`'s record, or None."""
    marker = (server_record(facts, server) or {}).get("in_progress")
    return dict(marker) if isinstance(marker, dict) else None


def read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None


def read_facts(path: str) -> dict[str, Any] | None:
    return parse_facts(read_text(path))


def is_backup(name: str, of: str) -> bool:
    """Whether the file name `name` is a template backup of the file named `of` (<of>.<pid>.<date>~)."""
    return name.startswith(of + ".") and name.endswith("~")


def backups_beside(path: str, root: str = "/") -> list[str]:
    """The backups beside `path` (a path on the host; `root`: where the host's file system is mounted)."""
    folder = Path(root) / path.lstrip("/")
    try:
        names = sorted(p.name for p in folder.parent.iterdir() if is_backup(p.name, folder.name))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    return [os.path.join(os.path.dirname(path), name) for name in names]
