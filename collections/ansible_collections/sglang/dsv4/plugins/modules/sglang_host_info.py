#!/usr/bin/python
"""Ansible module: the state of files, units, accounts and mounts on a host, read in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_host_info
short_description: Read the state of files, systemd units, accounts and mounts of a host in one call
description:
  - Reads what the deploy compares against before it writes, starts or creates anything, so that a host that is
    already as declared costs one round trip instead of one per item.
  - "Files: whether each exists, its kind, SHA-1 (Ansible's checksum), owner, group and mode."
  - "Units: systemd's C(ActiveState), C(UnitFileState) and C(NeedDaemonReload)."
  - "Accounts: which users and groups exist, with each user's groups."
  - "Mounts: the options each mount point is mounted with, from V(/proc/self/mountinfo)."
  - "Lines: the lines of a file that match a regular expression."
  - "URLs: one GET each, for example a daemon's readiness endpoint."
  - It only reads; it never changes anything.
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
options:
  files:
    description:
    - Paths to read. A missing path is reported in RV(files) with C(exists=false); a symbolic link is followed, and
      its target is reported too.
    type: list
    elements: path
    default: []
  units:
    description: systemd unit names, with their suffix (V(prometheus.service), V(sglang-drift-export.timer)).
    type: list
    elements: str
    default: []
  users:
    description: User names to look up.
    type: list
    elements: str
    default: []
  groups:
    description: Group names to look up.
    type: list
    elements: str
    default: []
  mounts:
    description: Mount points whose options to read.
    type: list
    elements: path
    default: []
  packages:
    description: Debian package names; whether each is installed is returned in RV(packages) (C(dpkg-query)).
    type: list
    elements: str
    default: []
  urls:
    description:
      - URLs to ask once each (a GET, from the host), for example a daemon's readiness endpoint; the answers are in
        RV(urls).
    type: list
    elements: str
    version_added: "1.3.0"
    default: []
  facts_file:
    description:
      - The deploy's facts record to read (RV(deployed)), through the records' one reader
        (plugins/module_utils/sglang_records.py).
    type: path
    version_added: "1.8.0"
  lines:
    description: Files and patterns; the matching lines of each are returned in RV(lines).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file.
        type: path
        required: true
      regexp:
        description: A Python regular expression searched in each line.
        type: str
        required: true
  preflight_stamps:
    description:
      - Servers of M(sglang.dsv4.sglang_preflight), each as the filter P(sglang.dsv4.sglang_preflight_stamps#filter)
        gives it from that module's O(sglang.dsv4.sglang_preflight#module:servers). RV(preflight_passed) lists those
        whose check would repeat a verdict, so that the deploy calls M(sglang.dsv4.sglang_preflight) only for the
        others.
    type: list
    elements: dict
    default: []
    version_added: "1.9.0"
    suboptions:
      unit:
        description: The server's systemd unit, without C(.service).
        type: str
        required: true
      env_file:
        description: The environment file its unit reads.
        type: str
        default: ""
      environment:
        description: The content about to be written into O(preflight_stamps[].env_file) (may hold the API key).
        type: str
        required: true
      digest:
        description: The digest of the server's inputs, as M(sglang.dsv4.sglang_preflight) remembers a pass.
        type: str
        required: true
"""

EXAMPLES = r"""
- name: Read the monitoring files and units in one call
  sglang.dsv4.sglang_host_info:
    files: [/etc/prometheus/prometheus.yml, /etc/prometheus/alertmanager.yml]
    units: [prometheus.service, prometheus-alertmanager.service]
  register: monitoring_state

- name: Start Prometheus only when it is not running
  ansible.builtin.systemd_service:
    name: prometheus.service
    state: started
  when: monitoring_state.units['prometheus.service'].active != 'active'
"""

RETURN = r"""
files:
  description:
    - Per path - exists, isdir, sha1 (null for a directory or a missing file), owner, group, mode (4 octal digits),
      islnk and lnk_target (where a symbolic link points; null for other paths).
  returned: always
  type: dict
  sample: {"/etc/prometheus/prometheus.yml": {"exists": true, "isdir": false, "sha1": "9c1d...", "owner": "root",
           "group": "root", "mode": "0644", "islnk": false, "lnk_target": null}}
units:
  description: Per unit - active (ActiveState), enabled (UnitFileState), need_daemon_reload (bool).
  returned: always
  type: dict
  sample: {"prometheus.service": {"active": "active", "enabled": "enabled", "need_daemon_reload": false}}
users:
  description: Per user - exists, group (primary), groups (supplementary group names), home, shell, comment.
  returned: always
  type: dict
  sample: {"sglang": {"exists": true, "group": "sglang", "groups": ["procview"], "home": "/var/lib/sglang",
           "shell": "/usr/sbin/nologin", "comment": "SGLang serving"}}
groups:
  description: Per group - exists, gid.
  returned: always
  type: dict
  sample: {"sglang": {"exists": true, "gid": 998}}
mounts:
  description: Per mount point - its options (mount and super block options, in that order), null when not mounted.
  returned: always
  type: dict
  sample: {"/proc": ["rw", "nosuid", "hidepid=invisible", "gid=997"]}
packages:
  description: Per package - whether dpkg has it installed (status C(ii)).
  returned: always
  type: dict
  sample: {"prometheus": true, "prometheus-alertmanager": false}
deployed:
  description: The facts record of O(facts_file), server to record; null when it is missing, not JSON or not given.
  returned: always
  type: dict
  sample: {"decode": {"unit": "sglang-dsv4-decode", "release": "wh-0123456789ab"}}
lines:
  description: Per file - the lines matching its pattern (an empty list for a missing file).
  returned: always
  type: dict
  sample: {"/etc/fstab": ["proc /proc proc defaults,hidepid=invisible,gid=997 0 0"]}
preflight_passed:
  description:
    - The units of O(preflight_stamps) that run with the environment file about to be written already on disk and
      whose very inputs passed M(sglang.dsv4.sglang_preflight) since the host booted (its C(passed_before)).
  returned: always
  type: list
  elements: str
  sample: [sglang-dsv4-prefill, sglang-dsv4-decode]
  version_added: "1.9.0"
urls:
  description:
    - Per URL - its answer in the shape of M(ansible.builtin.uri)'s result (C(url), C(status), C(json)); C(status)
      is -1 and C(msg) says why when nothing answered.
  returned: always
  type: dict
  sample: {"http://127.0.0.1:9090/-/ready": {"url": "http://127.0.0.1:9090/-/ready", "status": 200, "json": null}}
"""

import grp
import os
import pwd
import re
import stat
import subprocess
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_hostfs import group_name, ownership, sha1
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import probe
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import stamp_repeats, unit_active
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_records import read_facts


def read_file(path: str) -> dict[str, Any]:
    link = {"islnk": os.path.islink(path), "lnk_target": os.readlink(path) if os.path.islink(path) else None}
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {"exists": False, "isdir": False, "sha1": None, "owner": None, "group": None, "mode": None} | link
    isdir = stat.S_ISDIR(st.st_mode)
    return {"exists": True, "isdir": isdir, "sha1": None if isdir else sha1(path)} | ownership(st) | link


def read_units(module: AnsibleModule, units: list[str]) -> dict[str, Any]:
    if not units:
        return {}
    systemctl = module.get_bin_path("systemctl", required=True)
    props = "ActiveState,UnitFileState,NeedDaemonReload"
    proc = subprocess.run(
        [systemctl, "show", "--property", props, "--", *units], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        module.fail_json(msg=f"systemctl show {' '.join(units)} failed: {proc.stderr.strip()}")
    blocks = proc.stdout.strip("\n").split("\n\n")  # one block per unit, in the order asked
    out = {}
    for unit, block in zip(units, blocks, strict=False):
        values = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = {
            "active": values.get("ActiveState", ""),
            "enabled": values.get("UnitFileState", ""),
            "need_daemon_reload": values.get("NeedDaemonReload", "no") == "yes",
        }
    return out


def read_user(name: str) -> dict[str, Any]:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return {"exists": False, "group": None, "groups": [], "home": None, "shell": None, "comment": None}
    groups = sorted(g.gr_name for g in grp.getgrall() if name in g.gr_mem)
    return {
        "exists": True,
        "group": group_name(entry.pw_gid),
        "groups": groups,
        "home": entry.pw_dir,
        "shell": entry.pw_shell,
        "comment": entry.pw_gecos,
    }


def read_group(name: str) -> dict[str, Any]:
    try:
        return {"exists": True, "gid": grp.getgrnam(name).gr_gid}
    except KeyError:
        return {"exists": False, "gid": None}


def read_mounts(points: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(points)
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields = line.split()
            sep = fields.index("-")
            point = fields[4]
            if point in out:  # the last mount on a point is the one in effect
                out[point] = fields[5].split(",") + fields[sep + 3].split(",")
    return out


def read_packages(module: AnsibleModule, names: list[str]) -> dict[str, bool]:
    if not names:
        return {}
    dpkg = module.get_bin_path("dpkg-query", required=True)
    proc = subprocess.run(  # rc 1 when a name is unknown to dpkg: it counts as not installed
        [dpkg, "--show", "--showformat=${Package} ${db:Status-Abbrev}\n", "--", *names],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    installed = {line.split()[0] for line in proc.stdout.splitlines() if line.split()[1:2] == ["ii"]}
    return {name: name in installed for name in names}


def read_lines(path: str, pattern: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return [line.rstrip("\n") for line in handle if re.search(pattern, line)]
    except FileNotFoundError:
        return []


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "path", "default": []},
            "units": {"type": "list", "elements": "str", "default": []},
            "users": {"type": "list", "elements": "str", "default": []},
            "groups": {"type": "list", "elements": "str", "default": []},
            "mounts": {"type": "list", "elements": "path", "default": []},
            "facts_file": {"type": "path"},
            "packages": {"type": "list", "elements": "str", "default": []},
            "urls": {"type": "list", "elements": "str", "default": []},
            "lines": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {"path": {"type": "path", "required": True}, "regexp": {"type": "str", "required": True}},
            },
            "preflight_stamps": {
                "type": "list",
                "elements": "dict",
                "default": [],
                "options": {
                    "unit": {"type": "str", "required": True},
                    "env_file": {"type": "str", "default": ""},
                    "environment": {"type": "str", "required": True, "no_log": True},
                    "digest": {"type": "str", "required": True, "no_log": True},
                },
            },
        },
        supports_check_mode=True,
    )
    p = module.params
    module.exit_json(
        changed=False,
        files={path: read_file(path) for path in p["files"]},
        units=read_units(module, p["units"]),
        users={name: read_user(name) for name in p["users"]},
        groups={name: read_group(name) for name in p["groups"]},
        mounts=read_mounts(p["mounts"]) if p["mounts"] else {},
        deployed=read_facts(p["facts_file"]) if p["facts_file"] else None,
        packages=read_packages(module, p["packages"]),
        lines={item["path"]: read_lines(item["path"], item["regexp"]) for item in p["lines"]},
        urls={url: probe(url) for url in p["urls"]},
        preflight_passed=[stamp["unit"] for stamp in p["preflight_stamps"] if stamp_repeats(stamp, unit_active)],
    )


if __name__ == "__main__":
    main()
