#!/usr/bin/python
"""Ansible module: drain a router in the HAProxy front, or put it back, through HAProxy's admin socket."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_frontend_server
short_description: Drain a router in the HAProxy front until its sessions end, or put it back until it is up
description:
  - Talks to HAProxy's runtime API on the front host's admin socket (roles/sglang_frontend writes
    C(stats socket ... level admin)).
  - O(state=drain) sets the router's server to C(drain), so HAProxy sends it no new connection while its open
    sessions finish, then waits until it has none (C(scur) of C(show stat)).
  - O(state=ready) sets it back to C(ready) and waits until HAProxy's health check on C(/readiness) marks it C(UP),
    so a rolling change never drains the next router before this one takes connections again.
  - A server whose state was last set to the one asked for is not set again (C(changed) false), whatever its health
    check says (a drained router that is down, stopped for its restart, is drained already).
version_added: "1.9.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
  - sglang.dsv4.sglang.front
attributes:
  check_mode:
    support: full
    details: Reads the server's state only.
options:
  server:
    description: The router's server name in that backend (its inventory host name, or host name and port).
    type: str
    required: true
  state:
    description: C(drain) to take the router out, C(ready) to put it back.
    type: str
    choices: [drain, ready]
    required: true
  timeout:
    description: Seconds to wait for the open sessions to end (drain) or for the router to be up (ready).
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Take the router out of the front and let its requests finish
  sglang.dsv4.sglang_frontend_server:
    backend: sglang_routers
    server: router-01
    state: drain
  delegate_to: "{{ item }}"
  loop: "{{ groups['sglang_frontend'] }}"
"""

RETURN = r"""
before:
  description: The server's status and open sessions before the change.
  returned: always
  type: dict
  sample: {status: UP, sessions: 4}
after:
  description: The same once the wait ended.
  returned: always
  type: dict
  sample: {status: DRAIN, sessions: 0}
waited:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import (
    FRONT_ARGS,
    HAProxyError,
    admin_state,
    server_stat,
    set_state,
    wait_for,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **FRONT_ARGS,
            "server": {"type": "str", "required": True},
            "state": {"type": "str", "choices": ["drain", "ready"], "required": True},
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    started = time.monotonic()
    try:
        before = server_stat(p["socket"], p["backend"], p["server"])
        # The state last set, not the status word: a drained router that is down (stopped for its restart) is
        # drained already.
        changed = admin_state(p["socket"], p["backend"], p["server"]) != p["state"]
        after = before
        if not module.check_mode:
            if changed:
                set_state(p["socket"], p["backend"], p["server"], p["state"])
            done = "idle" if p["state"] == "drain" else "up"
            after = wait_for(p["socket"], p["backend"], p["server"], done, p["timeout"])
    except HAProxyError as e:
        module.fail_json(msg=f"{e}. The front must list every router of sglang_router (rerun roles/sglang_frontend).")
    module.exit_json(
        changed=changed,
        before={"status": before.status, "sessions": before.sessions},
        after={"status": after.status, "sessions": after.sessions},
        waited=round(time.monotonic() - started, 2),
    )


if __name__ == "__main__":
    main()
