#!/usr/bin/python
"""Ansible module: import what the engine imports in a new release's Python, before the release is complete."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_check
short_description: Import the modules an engine loads at start in a new release's Python
description:
  - Runs the release's Python once and imports each module of O(imports) as the engine would, after the modules of
    O(preload) that the release has (SGLang imports torch first, which loads the CUDA runtime that mooncake's engine
    links).
  - A real import, not a lookup, so an extension whose system library is missing on the host (C(libibverbs.so.1),
    C(libcuda.so.1)) fails here, before the release is marked complete and long before an engine would fail to start.
  - Fails with one message per module that does not import, naming why the engine needs it, where a missing system
    library comes from, and O(fix).
version_added: "1.5.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
attributes:
  check_mode:
    support: full
    details: Imports the same modules; nothing is written.
options:
  python:
    description: The new release's Python.
    type: path
    required: true
  imports:
    description: Module to why the engine imports it.
    type: dict
    required: true
  preload:
    description: Modules imported first where the release has them.
    type: list
    elements: str
    default: [torch]
  fix:
    description: What to change when a module does not import, appended to each message.
    type: str
    default: ""
  timeout:
    description: Seconds the imports may take (torch and SGLang take a while on a cold host).
    type: int
    default: 600
"""

EXAMPLES = r"""
- name: Import the transfer backend in the new release
  sglang.dsv4.sglang_release_check:
    python: /opt/sglang/releases/0123456789ab-ba9876543210/venv/bin/python
    imports:
      mooncake.engine: disaggregation_transfer_backend mooncake imports it
"""

RETURN = r"""
imports:
  description: Module (the preloads the release has included) to C(ok) or the error its import raised.
  returned: always
  type: dict
"""

import json
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import (
    RELEASE_PRELOAD,
    release_check_argv,
    release_problems,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "imports": {"type": "dict", "required": True},
            "preload": {"type": "list", "elements": "str", "default": RELEASE_PRELOAD},
            "fix": {"type": "str", "default": ""},
            "timeout": {"type": "int", "default": 600},
        },
        supports_check_mode=True,
    )
    p = module.params
    argv = release_check_argv(p["python"], p["imports"], p["preload"])
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=p["timeout"], check=False, cwd="/")
    except (OSError, subprocess.TimeoutExpired) as e:
        module.fail_json(msg=f"the new release's Python {p['python']} did not run the import check: {e}. {p['fix']}")
    try:
        answer = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(
            msg=f"the new release's Python {p['python']} did not finish the import check (exit {run.returncode}: "
            f"{run.stderr.strip()[-800:]}). {p['fix']}",
        )
    problems = release_problems(p["python"], answer, p["imports"], p["fix"])
    if problems:
        module.fail_json(msg=" ".join(problems), problems=problems, imports=answer)
    module.exit_json(changed=False, imports=answer)


if __name__ == "__main__":
    main()
