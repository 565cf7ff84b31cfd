#!/usr/bin/python
"""Ansible module: the routers' state in the HAProxy front of this host, from its admin socket."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_frontend_info
short_description: Read the state of every router in the HAProxy front of this host
description:
  - Reads C(show stat) on HAProxy's admin socket (roles/sglang_frontend) and returns each server of the routers'
    backend with its check status and open sessions. The audit (roles/sglang_audit) judges which routers are in the
    front and which are out.
  - Reads only.
version_added: "1.9.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
  - sglang.dsv4.sglang.front
attributes:
  check_mode:
    support: full
    details: Reads the same; nothing is written.
"""

EXAMPLES = r"""
- name: Read the routers' state in the front
  sglang.dsv4.sglang_frontend_info:
    backend: sglang_routers
  register: front
"""

RETURN = r"""
servers:
  description: Every server of the backend, in HAProxy's order.
  returned: success
  type: list
  elements: dict
  sample: [{server: router-01, status: UP, sessions: 3}, {server: router-02, status: DRAIN, sessions: 0}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import (
    FRONT_ARGS,
    HAProxyError,
    command,
    parse_stat,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **FRONT_ARGS,
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        stats = parse_stat(command(p["socket"], "show stat"))
    except HAProxyError as e:
        module.fail_json(msg=f"{e}; is HAProxy running (roles/sglang_frontend)?")
    servers = [
        {"server": s.server, "status": s.status, "sessions": s.sessions}
        for (backend, _name), s in stats.items()
        if backend == p["backend"]
    ]
    module.exit_json(changed=False, servers=servers)


if __name__ == "__main__":
    main()
