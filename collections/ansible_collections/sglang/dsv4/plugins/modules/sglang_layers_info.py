#!/usr/bin/python
"""Ansible module: the on-disk and running layers of one SGLang server on its host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_layers_info
short_description: Read the on-disk and running limits of one SGLang engine or smg router on its host
description:
  - "On disk: parses the C(exec) line of the serve script and the environment file back into envelope keys with the
    project's flag codec, and reads the unit file's C(ExecStart) and C(EnvironmentFile)."
  - "Running: reads the argv and the environment of the unit's main process from V(/proc/<MainPID>/cmdline) and
    V(/proc/<MainPID>/environ), and tells whether the files changed after the process started (changed but not
    restarted)."
  - smg rewrites its process title (and with it the environment block), so its argv cannot be read from V(/proc). The
    running layer is then the files' values, but only when none of the files changed after the process started;
    otherwise it is unknown.
  - Also returns the envelope the last deploy recorded in the local facts file.
  - Secrets are redacted (C(<redacted>)); the raw environment is never returned. Never changes anything.
  - It only reads. The controller judges what it returns against the declaration (the audit's report,
    plugins/module_utils/sglang_drift.py C(judge)).
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
options:
  role:
    description: What the server is.
    type: str
    required: true
    choices: [prefill, decode, router]
  unit:
    description: The systemd unit, without C(.service). Defaults to V(sglang-dsv4-<role>).
    type: str
  script:
    description: The serve script (the server layout's C(script), filter C(sglang_server_layout)).
    type: path
    required: true
  env_file:
    description: The environment file (the server layout's C(env_file)).
    type: path
    required: true
  facts_file:
    description:
      - The local facts file written at deploy (JSON; the server layout's C(facts_file)). An empty string skips it.
    type: path
    required: true
  name:
    description: Host name used in messages. Defaults to the host's name.
    type: str
  release_fact_file:
    description:
      - The record of an engine release switch that has not finished (the server layout's C(release_fact_file)),
        read when O(releases_dir) is set.
    type: path
  releases_dir:
    description:
      - Engine releases folder (the C(current) and C(previous) links lie beside it). Releases the deploy would not
        keep (not linked and not among the newest O(keep_releases) complete ones,
        plugins/module_utils/sglang_releases.py) are listed in RV(releases), an unfinished release switch
        (O(release_fact_file)) in RV(release_switch). Omitted, neither is read.
    type: path
  keep_releases:
    description: How many of the newest complete releases the deploy keeps besides the linked ones.
    type: int
    default: 3
  unit_dir:
    description: Where the unit file is (C(<unit_dir>/<unit>.service)).
    type: path
    default: /etc/systemd/system
  checksums:
    description: Add each file's SHA-1 (C(sha1), Ansible's checksum) to RV(files), for a deploy to compare with what
      it would write.
    type: bool
    default: false
  health_url:
    description:
      - Also ask the server's health endpoint on the host once (for example V(http://127.0.0.1:30000/health)) and
        return the answer in RV(health), so that a deploy that changes nothing needs no second call to gate on it.
    type: str
    version_added: "1.3.0"
seealso:
  - module: sglang.dsv4.sglang_live_info
"""

EXAMPLES = r"""
- name: Read the decode engine's files and process
  sglang.dsv4.sglang_layers_info:
    role: decode
    script: /opt/sglang/bin/serve_dsv4_decode.sh
    env_file: /etc/sglang/dsv4-decode.env
    facts_file: /etc/ansible/facts.d/sglang.fact
  register: decode_layers

- name: Warn about a pending restart
  ansible.builtin.debug:
    msg: "{{ decode_layers.unit.changed_since_start }} changed after the engine started"
  when: decode_layers.restart_pending
"""

RETURN = r"""
role:
  description: The server's role (O(role)).
  returned: always
  type: str
on_disk:
  description: Envelope keys parsed from the serve script and the environment file; null when the script is missing.
  returned: always
  type: dict
  sample: {context_length: 131072, max_running_requests: 64, bf16_index_k: true, api_key: <redacted>}
running:
  description: Envelope keys of the live process; null when the unit has no main process or its argv is unknown.
  returned: always
  type: dict
running_source:
  description: V(proc) (read from /proc), V(files) (process title rewritten, files unchanged since start) or V(unknown).
  returned: always
  type: str
restart_pending:
  description: A file changed after the process started.
  returned: always
  type: bool
unit:
  description: The unit's ExecStart, EnvironmentFile, ActiveState, MainPID, start time and the files changed since.
  returned: always
  type: dict
files:
  description:
    - Path, existence, mtime, owner, group and mode of the script, the environment file and the unit file, whether
      each differs from the checksum the last deploy recorded (C(edited_since_deploy)) and, with O(checksums), its
      SHA-1 (C(sha1)).
  returned: always
  type: dict
edited_since_deploy:
  description: The files (script, env_file, unit) whose checksum differs from the one the last deploy recorded.
  returned: always
  type: list
  elements: str
deployed:
  description: The envelope the last deploy recorded in the local facts for this role (secrets redacted), or null.
  returned: always
  type: dict
in_progress:
  description: The marker of a deploy that started and did not finish (since, envelope, release, files), or null.
  returned: always
  type: dict
backups:
  description: Backup copies of the files left on the host (a finished deploy removes them).
  returned: always
  type: list
  elements: str
releases:
  description: Releases the deploy would not keep (see O(releases_dir)).
  returned: always
  type: list
  elements: str
release_switch:
  description:
    - An engine release switch that started and did not finish (C(to), C(from), C(since)), read from
      O(release_fact_file) when O(releases_dir) is set; null otherwise.
  returned: always
  type: dict
health:
  description:
    - The answer of O(health_url) in the shape of M(ansible.builtin.uri)'s result (C(url), C(status), C(json));
      C(status) is -1 and C(msg) says why when nothing answered. Null without O(health_url).
  returned: always
  type: dict
  sample: {url: "http://127.0.0.1:8000/readiness", status: 200, json: {healthy_workers: 2}}
cpus:
  description: The host's CPU count (smg derives its default in-flight cap from it).
  returned: always
  type: int
problems:
  description: What is missing or inconsistent on the host; each names the file or the unit.
  returned: always
  type: list
  elements: str
notes:
  description: How the layers were read.
  returned: always
  type: list
  elements: str
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_server_read import read_files


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "router"]},
            "unit": {"type": "str"},
            "script": {"type": "path", "required": True},
            "env_file": {"type": "path", "required": True},
            "facts_file": {"type": "path", "required": True},
            "name": {"type": "str"},
            "releases_dir": {"type": "path"},
            "release_fact_file": {"type": "path"},
            "keep_releases": {"type": "int", "default": 3},
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "checksums": {"type": "bool", "default": False},
            "health_url": {"type": "str"},
        },
        supports_check_mode=True,
    )

    def systemctl(argv: list[str]) -> str:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(msg=f"{' '.join(argv)} failed (rc={rc}): {err.strip()}")
        return str(out)

    name = module.params["name"] or socket.gethostname()
    module.exit_json(**read_files(module.params, HostFiles(root="/", run=systemctl), name))


if __name__ == "__main__":
    main()
