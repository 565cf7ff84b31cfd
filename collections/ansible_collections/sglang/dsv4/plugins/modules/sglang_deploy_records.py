#!/usr/bin/python
"""Ansible module: write and clear the deploy's records on a host (the facts record with its in-progress markers, the
release-switch record, and the template backups), in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_deploy_records
short_description: Write and clear the deploy's records on a host
description:
  - The one writer of the deploy's records (their formats are plugins/module_utils/sglang_records.py, which
    M(sglang.dsv4.sglang_host_info) and M(sglang.dsv4.sglang_layers_info) read them through).
  - "The facts record: what each server last passed its health gate with (O(deployed)), and the marker of a deploy
    that has begun (O(in_progress))."
  - "The release-switch record: an engine release switch that has begun (O(release_switch)) or finished
    (O(release_switch_done))."
  - "Template backups: the copies Ansible left beside the server files (O(clear_backups))."
  - Each record is replaced atomically (a file written beside it, then renamed over it) with the owner, group and
    mode of O(records), and only when its content or metadata differs; in one call the switch record is written
    first, then the facts record, then the switch record removed, then the backups.
version_added: "1.8.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
attributes:
  check_mode:
    support: full
    details: Reports what it would write or remove; nothing changes.
  diff_mode:
    support: full
    details: The records' text before and after (not the backups, which are copies of server files).
options:
  records:
    description: Where the records live and who owns them (role variable C(sglang_defaults_records)).
    type: dict
    required: true
    suboptions:
      facts_file:
        description: The facts record.
        type: path
        required: true
      release_fact_file:
        description: The release-switch record.
        type: path
        required: true
      owner:
        description: Owner of both records.
        type: str
        required: true
      group:
        description: Group of both records.
        type: str
        required: true
      mode:
        description: Mode of both records, in octal.
        type: str
        required: true
      dir:
        description: The folder of the records, created with this owner, group and mode where it is missing.
        type: dict
        required: true
        suboptions:
          path:
            description: The folder.
            type: path
            required: true
          owner:
            description: Its owner.
            type: str
            required: true
          group:
            description: Its group.
            type: str
            required: true
          mode:
            description: Its mode, in octal.
            type: str
            required: true
  deployed:
    description: The facts record to write, server name to its record.
    type: dict
  in_progress:
    description: Mark one server's deploy as begun in the written O(deployed) (requires it); C(since) is set here.
    type: dict
    suboptions:
      server:
        description: The server's name in the record (V(prefill), V(decode) or V(router)).
        type: str
        required: true
      envelope:
        description: The envelope being applied.
        type: dict
        required: true
      release:
        description: The engine release being applied (null for the router).
        type: str
      files:
        description: The server files about to be written.
        type: list
        elements: str
        required: true
  release_switch:
    description: Record an engine release switch as begun; C(since) is set here.
    type: dict
    suboptions:
      to:
        description: The release being switched to.
        type: str
        required: true
      from:
        description: The release current points at now (null without one).
        type: str
  release_switch_done:
    description: Remove the release-switch record.
    type: bool
    default: false
  clear_backups:
    description: Server files whose template backups to remove.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Record the deploy of the decode engine as in progress
  sglang.dsv4.sglang_deploy_records:
    records: "{{ sglang_defaults_records }}"
    deployed: "{{ sglang_common_deployed }}"
    in_progress:
      server: decode
      envelope: {mem_fraction_static: 0.83}
      release: wh-0123456789ab
      files: [script]

- name: Write the record after the gate, end the release switch and remove the backups
  sglang.dsv4.sglang_deploy_records:
    records: "{{ sglang_defaults_records }}"
    deployed: "{{ sglang_common_deployed }}"
    release_switch_done: true
    clear_backups: [/opt/sglang/bin/serve_dsv4_decode.sh, /etc/sglang/dsv4-decode.env]
"""

RETURN = r"""
facts_sha1:
  description: SHA-1 of the facts record as written (or as it already was); null when O(deployed) was not given.
  returned: always
  type: str
written:
  description: The records written (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
removed:
  description: The records and backups removed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
"""

import contextlib
import grp
import hashlib
import os
import pwd
import tempfile
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_hostfs import make_folders
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import (
    backups_beside,
    marked,
    now,
    read_text,
    record_text,
    switch_record,
)

_OWNED = {k: {"type": "str", "required": True} for k in ("owner", "group", "mode")}
ARGS: dict[str, Any] = {
    "records": {"type": "dict", "required": True, "options": {
        "facts_file": {"type": "path", "required": True},
        "release_fact_file": {"type": "path", "required": True},
        **_OWNED,
        "dir": {"type": "dict", "required": True, "options": {"path": {"type": "path", "required": True}, **_OWNED}},
    }},
    "deployed": {"type": "dict"},
    "in_progress": {"type": "dict", "options": {
        "server": {"type": "str", "required": True},
        "envelope": {"type": "dict", "required": True},
        "release": {"type": "str"},
        "files": {"type": "list", "elements": "str", "required": True},
    }},
    "release_switch": {"type": "dict", "options": {"to": {"type": "str", "required": True}, "from": {"type": "str"}}},
    "release_switch_done": {"type": "bool", "default": False},
    "clear_backups": {"type": "list", "elements": "path", "default": []},
}  # fmt: skip


class Records:
    """Writes and removals of one call, each done unless in check mode, and listed."""

    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.spec = module.params["records"]
        self.written: list[str] = []
        self.removed: list[str] = []
        self.diff: list[dict[str, str]] = []

    def _differs(self, path: str, before: str | None, after: str) -> None:
        if self.module._diff:
            self.diff.append({"before_header": path, "after_header": path, "before": before or "", "after": after})

    def _ids(self, owned: dict[str, str]) -> tuple[int, int, int]:
        try:
            return pwd.getpwnam(owned["owner"]).pw_uid, grp.getgrnam(owned["group"]).gr_gid, int(owned["mode"], 8)
        except (KeyError, ValueError) as exc:
            self.module.fail_json(msg=f"records: owner, group or mode {owned} is not usable on this host: {exc}")
            raise

    def write(self, path: str, text: str) -> None:
        """Replace `path` by `text` atomically, with the records' owner, group and mode, where anything differs."""
        uid, gid, mode = self._ids(self.spec)
        before = read_text(path)
        try:
            st = os.stat(path)
            same = before == text and (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (uid, gid, mode)
        except FileNotFoundError:
            same = False
        if same:
            return
        self.written.append(path)
        self._differs(path, before, text)
        if self.module.check_mode:
            return
        self._folder()
        handle, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=os.path.dirname(path))
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            os.chown(tmp, uid, gid)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            self.module.fail_json(msg=f"could not write {path}: {exc}", written=self.written[:-1], removed=self.removed)

    def _folder(self) -> None:
        folder = self.spec["dir"]
        if not os.path.isdir(folder["path"]):
            uid, gid, mode = self._ids(folder)
            make_folders(folder["path"])  # those above it 0755 whatever the umask; it, as declared below
            os.chown(folder["path"], uid, gid)
            os.chmod(folder["path"], mode)

    def remove(self, path: str, record: bool = True) -> None:
        if not os.path.lexists(path):
            return
        self.removed.append(path)
        if record:
            self._differs(path, read_text(path), "")
        if not self.module.check_mode:
            try:
                os.unlink(path)
            except OSError as exc:
                self.module.fail_json(msg=f"could not remove {path}: {exc}", written=self.written, removed=self.removed)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True, required_by={"in_progress": "deployed"})
    p = module.params
    records = Records(module)
    since = now()
    switch = p["release_switch"]
    if switch is not None:
        record = switch_record(switch["to"], switch["from"], since)
        records.write(records.spec["release_fact_file"], record_text(record))
    facts_sha1 = None
    if p["deployed"] is not None:
        deployed = p["deployed"]
        if p["in_progress"] is not None:
            marker = dict(p["in_progress"])
            deployed = marked(deployed, marker.pop("server"), marker, since)
        text = record_text(deployed)
        records.write(records.spec["facts_file"], text)
        facts_sha1 = hashlib.sha1(text.encode("utf-8")).hexdigest()
    if p["release_switch_done"]:
        records.remove(records.spec["release_fact_file"])
    for path in p["clear_backups"]:
        for copy in backups_beside(path):
            records.remove(copy, record=False)
    module.exit_json(
        changed=bool(records.written or records.removed),
        facts_sha1=facts_sha1,
        written=records.written,
        removed=records.removed,
        diff=records.diff,
    )


if __name__ == "__main__":
    main()
