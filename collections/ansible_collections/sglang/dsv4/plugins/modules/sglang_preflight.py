#!/usr/bin/python
"""Ansible module: check a server on its host as its unit will run it, before anything restarts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_preflight
short_description: Check the servers of a host under their units' own user, sandbox and environment, before a restart
description:
  - For each server, runs a short probe in a transient systemd unit (C(systemd-run)) with the [Service] directives of
    the server's rendered unit that bound its process (C(User), C(Group), the sandbox, limits, C(DeviceAllow),
    C(WorkingDirectory)) and the environment file the deploy is about to write.
  - "The probe binds every listener the server will own; a listener already taken is looked up as root: held by the
    same server's unit, it is fine (that server restarts in place), held by anything else, it is refused."
  - It reads the paths the server reads, finds the modules it imports in its release's Python (when the release is
    installed) and opens the GPUs it is declared to use.
  - Every problem names the server, the declared variable and its value, and what to change. The module fails with
    all of them, so the play stops before any server stops.
  - Where the service account does not exist yet (a first deploy under C(--check)), the probe runs as root in the same
    sandbox and says so in RV(notes).
version_added: "1.5.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
attributes:
  check_mode:
    details: Runs the same probe (a transient unit that runs and is gone); remembers no pass (C(passed_before)).
options:
  servers:
    description: The servers of the host.
    type: list
    elements: dict
    required: true
    suboptions:
      role:
        description: The server's role.
        type: str
        choices: [prefill, decode, router]
        required: true
      unit:
        description: The server's systemd unit, without C(.service).
        type: str
        required: true
      service:
        description: The [Service] section of the rendered unit (directive to value or list of values).
        type: dict
        required: true
      environment:
        description: The content of the environment file the deploy will write (may hold the API key).
        type: str
        required: true
      env_file:
        description:
          - The path of the environment file the server's unit reads. A server whose unit runs with
            O(servers[].environment) already in that file, and whose very inputs passed the preflight since the host
            booted (a digest under C(/run/sglang-preflight)), is not checked again (C(passed_before) in RV(servers)).
        type: str
        default: ""
      listeners:
        description: "C([address, port]) of every socket the server will listen on; C(*) for a wildcard address."
        type: list
        elements: list
        required: true
      paths:
        description: Paths the server reads; each must be readable as its unit runs.
        type: list
        elements: str
        default: []
      path_vars:
        description: The declared variable of each of O(servers[].paths), for the messages.
        type: list
        elements: str
        default: []
      python:
        description: The release's Python; the imports are looked up there. Not checked where it does not exist yet.
        type: str
      imports:
        description: Top-level module the server imports at start (the transfer backend's among them) to why.
        type: dict
        default: {}
      gpu_ids:
        description: The GPUs the server is declared to use; each C(/dev/nvidia<id>) must open under the unit.
        type: list
        elements: int
        default: []
      sglang_argv:
        description:
          - The engine's flags after C(sglang serve) (C(${NAME}) references are read from the unit's environment).
          - Where the release's Python has C(sglang), SGLang's own startup checks (O(startup_check)) run on them in
            the unit, with its environment file loaded, up to the last step before the model loads.
        type: list
        elements: str
        default: []
  startup_check:
    description: The script that runs SGLang's startup checks (filter C(sglang_startup_check_files)). Omitted, no
      such check runs.
    type: dict
    suboptions:
      script:
        description: The file of O(startup_check.files) to run.
        type: str
        required: true
      files:
        description: File name to text, the script's and its helpers'.
        type: dict
        required: true
  timeout:
    description: Seconds each transient unit may take (SGLang's startup checks import torch and SGLang).
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Check the decode engine as its unit will run it
  sglang.dsv4.sglang_preflight:
    servers:
      - role: decode
        unit: sglang-dsv4-decode
        service: {User: sglang, Group: sglang, ProtectHome: true, WorkingDirectory: /var/lib/sglang}
        environment: "SGLANG_DSV4_BF16_INDEX_K=1\n"
        listeners: [["127.0.0.1", 30001]]
"""

RETURN = r"""
servers:
  description: Per server, what the probe found for each listener (C(bound), C(EADDRINUSE) with C(held_by) where the
    same unit holds it, C(EACCES), ...) and how long its transient unit took; C(passed_before) where it was not
    checked again (O(servers[].env_file)).
  returned: always
  type: list
  elements: dict
notes:
  description: What the probe could not prove (a first deploy's missing account or release).
  returned: always
  type: list
  elements: str
"""

import json
import os
import pwd
import subprocess
import sys
import tempfile
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import (
    SERVER_OPTIONS,
    passed_before,
    probe_argv,
    remember_pass,
    server_problems,
    systemd_run_argv,
    unit_active,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_sockets import holders

# Exit statuses of a process systemd could not set up (systemd.exec(5)): the unit itself would fail the same way.
EXEC_STATUS = {
    200: "CHDIR", 203: "EXEC", 204: "MEMORY", 216: "GROUP", 217: "USER", 219: "CGROUP", 226: "NAMESPACE",
    228: "SECCOMP",
}  # fmt: skip
# ... except that 219/CGROUP, the service manager failing to set up the transient unit's control group, was also
# seen once from an unchanged unit on a loaded lab host. One more try under a new unit name tells the two apart: a
# unit whose own settings cause it fails both.
RETRIED_STATUS = 219


def check(
    p: dict[str, Any], timeout: int, startup: dict[str, Any] | None
) -> tuple[list[str], list[str], dict[str, Any]]:
    """(problems, notes, result) of one server."""
    notes: list[str] = []
    service = dict(p["service"])
    user = str(service.get("User") or "root")
    try:
        pwd.getpwnam(user)
    except KeyError:
        notes.append(
            f"{p['unit']}: the account {user} does not exist yet (first deploy): checked as root in the same sandbox"
        )
        for key in ("User", "Group", "WorkingDirectory"):
            service.pop(key, None)
        user = "root"
    if service.get("WorkingDirectory") and not os.path.isdir(str(service["WorkingDirectory"])):
        notes.append(f"{p['unit']}: WorkingDirectory {service['WorkingDirectory']} does not exist yet: not entered")
        service.pop("WorkingDirectory")
    python = p["python"] if p["python"] and os.path.exists(p["python"]) else None
    if p["imports"] and python is None:
        notes.append(f"{p['unit']}: no release Python at {p['python']} yet: its imports are not checked")
    spec = {"listeners": [[str(a), int(port)] for a, port in p["listeners"]], "paths": p["paths"], "python": python,
            "imports": list(p["imports"]) if python else [], "gpu_ids": p["gpu_ids"]}  # fmt: skip
    if python and p["sglang_argv"] and startup:
        spec["sglang_check"] = {**startup, "argv": p["sglang_argv"], "timeout": max(timeout - 30, 30)}
    fd, env_file = tempfile.mkstemp(prefix="sglang-preflight-", suffix=".env", dir="/run")
    start = time.monotonic()
    try:
        with os.fdopen(fd, "w") as f:
            f.write(p["environment"])
        for attempt in (1, 2):
            name = f"sglang-preflight-{p['role']}-{os.getpid()}-{attempt}"
            argv = systemd_run_argv(name, service, env_file, probe_argv(sys.executable, spec))
            try:
                run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout + 10, check=False)
            except subprocess.TimeoutExpired:
                # systemd-run killed leaves its unit running: stopped, not left to hang on.
                subprocess.run(["systemctl", "stop", "--no-block", f"{name}.service"], capture_output=True,
                               check=False)  # fmt: skip
                problem = (
                    f"{p['unit']}: a transient unit with its User={user}, sandbox and environment did not answer in "
                    f"{timeout + 10} s (stopped); the probe hangs where the server would start: reading a declared "
                    f"path (a network file system that does not answer), opening a GPU, or SGLang's startup checks. "
                    f"Check the paths and GPUs declared for it."
                )
                return [problem], notes, {"unit": p["unit"], "seconds": round(time.monotonic() - start, 2)}
            if run.returncode != RETRIED_STATUS or attempt == 2:
                break
            notes.append(f"{p['unit']}: systemd could not set up the transient unit's control group "
                         f"(exit {RETRIED_STATUS}); tried once more")  # fmt: skip
    finally:
        os.unlink(env_file)
    seconds = round(time.monotonic() - start, 2)
    try:
        answer = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        status = EXEC_STATUS.get(run.returncode, "")
        problem = (
            f"{p['unit']}: a transient unit with its User={user}, sandbox and environment did not run "
            f"(systemd-run exit {run.returncode}{' ' + status if status else ''}: {run.stderr.strip()[-500:]}); "
            f"the server's own unit would fail to start the same way. Check the account, WorkingDirectory and the "
            f"unit overrides declared for it."
        )
        return [problem], notes, {"unit": p["unit"], "seconds": seconds}
    skipped = (answer.get("sglang_check") or {}).get("skipped")
    if skipped:
        notes.append(f"{p['unit']}: {skipped}: SGLang's startup checks ran on the controller only (the deep check)")
    server = {"role": p["role"], "unit": p["unit"], "user": user, "path_vars": p["path_vars"], "python": python,
              "import_reasons": p["imports"], "gpu_ids": p["gpu_ids"]}  # fmt: skip
    return (
        server_problems(server, answer, holders),
        notes,
        {"unit": p["unit"], "listeners": answer["listeners"], "seconds": seconds},
    )


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "required": True, "options": SERVER_OPTIONS},
            "startup_check": {
                "type": "dict",
                "options": {"script": {"type": "str", "required": True}, "files": {"type": "dict", "required": True}},
            },
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    problems: list[str] = []
    notes: list[str] = []
    servers = []
    for p in module.params["servers"]:
        if passed_before(p, unit_active):
            notes.append(f"{p['unit']}: runs with these very inputs, which passed its preflight: not checked again")
            servers.append({"unit": p["unit"], "passed_before": True, "seconds": 0.0})
            continue
        found, noted, result = check(p, module.params["timeout"], module.params["startup_check"])
        problems += found
        notes += noted
        servers.append(result)
        if not found and not module.check_mode:
            remember_pass(p)
    if problems:
        module.fail_json(msg=" ".join(problems), problems=problems, notes=notes, servers=servers)
    module.exit_json(changed=False, notes=notes, servers=servers)


if __name__ == "__main__":
    main()
