#!/usr/bin/python
"""Ansible module: wait until an SGLang engine has no request in flight, or gate on a real generation through it."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_engine_gate
short_description: Wait until an SGLang engine is idle (its /v1/loads), or gate on one real generation through it
description:
  - "O(wait=idle): poll C(/v1/loads) until the engine runs and queues no request (running, waiting and, in PD mode,
    the disaggregation queues), at most O(timeout) seconds; then fail naming how many are left."
  - "O(wait=generation): one C(/generate) of one new token sent to this engine alone; a PD engine gets SGLang's own
    health-check bootstrap host (V(2.2.2.2)), so it generates without a partner. Fails unless it answers 200 with a
    token. C(/health) can answer 200 while requests hang; this cannot."
  - Runs on the engine's host (the engine may listen on loopback only).
version_added: "1.1.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
  - sglang.dsv4.sglang.wait
attributes:
  check_mode:
    details: Reports the requests in flight now; waits for nothing and sends no generation.
options:
  engine:
    description: Base URL of the engine, for example V(http://127.0.0.1:30001).
    type: str
    required: true
  role:
    description: The engine's role (a PD engine gets the health-check bootstrap host).
    type: str
    choices: [prefill, decode, unified]
    required: true
  wait:
    description: V(idle) or V(generation).
    type: str
    choices: [idle, generation]
    required: true
"""

EXAMPLES = r"""
- name: Wait until the decode engine has finished what it runs
  sglang.dsv4.sglang_engine_gate:
    engine: http://127.0.0.1:30001
    role: decode
    wait: idle
    timeout: 300
"""

RETURN = r"""
in_flight_at_start:
  description: Requests the engine ran or queued when the wait began (O(wait=idle)).
  returned: when wait is idle
  type: int
seconds:
  description: How long the wait or the generation took.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_rollout import (
    WAIT_ARGS,
    RolloutError,
    in_flight,
    probe_generation,
    wait_idle,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "engine": {"type": "str", "required": True},
            "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "unified"]},
            "wait": {"type": "str", "required": True, "choices": ["idle", "generation"]},
            **WAIT_ARGS,
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        if module.check_mode:
            module.exit_json(changed=False, in_flight_at_start=in_flight(p["engine"], p["api_key"]), seconds=0.0)
        if p["wait"] == "idle":
            result = wait_idle(p["engine"], p["api_key"], p["timeout"], p["interval"])
        else:
            result = probe_generation(p["engine"], p["role"], p["api_key"], p["timeout"])
    except (RolloutError, OSError) as e:
        module.fail_json(msg=f"{p['role']} engine {p['engine']}: {e}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
