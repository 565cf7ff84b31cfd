#!/usr/bin/python
"""Ansible module: the limits a live SGLang engine applies, and the state of an smg router, read over HTTP."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_live_info
short_description: Read the limits a live SGLang engine applies, or the state of an smg router
description:
  - Queries one SGLang 0.5.23 engine (prefill or decode) or one smg 1.13.0 router over HTTP and normalizes the answers
    into the keys of the envelope schema (C(plugins/module_utils/sglang_schema.py)).
  - "For an engine it reads V(/server_info) (V(/get_server_info) for older engines), V(/v1/models), V(/v1/loads) and,
    unless O(metrics=false), V(/metrics). All endpoints of the server are fetched at once, in threads."
  - "Effective values come from what the engine applies, not from its echoed arguments:
    C(context_length) from V(/v1/models) C(max_model_len); C(max_total_tokens) from the top-level
    C(max_total_num_tokens) (else C(internal_states[0].memory_usage.token_capacity)); C(max_running_requests) from
    C(internal_states[0].effective_max_running_requests_per_dp) times C(attn_dp_size); the other keys from the resolved
    server arguments. C(max_queued_requests) is reported as C(<ignored>) on prefill and decode engines, since SGLang
    checks it only without disaggregation."
  - "For the router it reads V(/readiness) and V(/workers). smg does not report its own limits over HTTP: they come from
    its running argv (M(sglang.dsv4.sglang_layers_info)), with smg's defaults for unset flags."
  - It only reads. The controller judges what it returns against the declaration, with the host's layers (the audit's
    report, plugins/module_utils/sglang_drift.py C(judge)).
  - The raw V(/server_info) body contains the API key in plaintext. It is never returned or logged; errors name the host
    and the endpoint only.
  - Runs on the host of the server (the engines may listen on loopback only). Never changes anything.
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
options:
  endpoint:
    description: Base URL of the server, for example V(http://127.0.0.1:30001).
    type: str
    required: true
  role:
    description: What the server is.
    type: str
    required: true
    choices: [prefill, decode, router]
  api_key:
    description:
      - Bearer token for the server (the engine's C(--api-key)). V(/server_info) and V(/v1/models) need it when the
        engine has one.
      - Takes precedence over O(api_key_env_file).
    type: str
  api_key_env_file:
    description:
      - Environment file on the host to read C(SGLANG_API_KEY) from when O(api_key) is not given, for example the
        deployed V(/etc/sglang/dsv4-decode.env). The key never leaves the host.
    type: path
  timeout:
    description: Seconds to wait for each endpoint.
    type: float
    default: 10
  validate_certs:
    description: Verify TLS certificates for V(https) endpoints.
    type: bool
    default: true
  metrics:
    description:
      - Read V(/metrics) (engines). A 404 only means the engine runs without C(--enable-metrics); pass V(false) when
        the declaration turns metrics off.
    type: bool
    default: true
  name:
    description: Host name used in messages. Defaults to the host's name.
    type: str
notes:
  - The module does not fail when the server does not answer; RV(status) is V(unreachable) and RV(errors) says why.
seealso:
  - module: sglang.dsv4.sglang_layers_info
  - module: sglang.dsv4.sglang_audit_report
"""

EXAMPLES = r"""
- name: Read the decode engine's live limits
  sglang.dsv4.sglang_live_info:
    endpoint: http://127.0.0.1:30001
    role: decode
    api_key_env_file: /etc/sglang/dsv4-decode.env
  register: decode_live

- name: Show the effective per-call context
  ansible.builtin.debug:
    msg: "{{ decode_live.live.context_length }} tokens per call"

- name: List the router's workers
  sglang.dsv4.sglang_live_info:
    endpoint: http://127.0.0.1:8000
    role: router
  register: router_live
"""

RETURN = r"""
endpoint:
  description: The server's base URL (O(endpoint)).
  returned: always
  type: str
  sample: http://127.0.0.1:30001
role:
  description: The server's role (O(role)).
  returned: always
  type: str
name:
  description: The host name used in messages.
  returned: always
  type: str
status:
  description: V(ok), V(unreachable) (no answer at all) or V(error) (an answer the module could not use, such as a 401).
  returned: always
  type: str
  sample: ok
reachable:
  description: Whether the server answered at all.
  returned: always
  type: bool
version:
  description: The engine version from V(/server_info); null for the router and when no engine answered.
  returned: always
  type: str
  sample: 0.5.23
live:
  description:
    - Effective values under the envelope keys; keys the engine does not report are absent.
    - Null when no engine answered, and for the router (smg reports no limits over HTTP).
  returned: always
  type: dict
  sample: {context_length: 131072, max_total_tokens: 1843200, max_running_requests: 64, max_queued_requests: <ignored>}
requested:
  description: What V(/server_info) echoes for the limits (the arguments, not what is applied).
  returned: always
  type: dict
  sample: {context_length: null, max_running_requests: 32}
sources:
  description: Where each effective limit was read.
  returned: always
  type: dict
  sample: {context_length: /v1/models max_model_len}
notes:
  description: Per key, what explains an effective value (defaults, ignored flags).
  returned: always
  type: dict
load:
  description: Current load (empty unless an engine answered).
  returned: always
  type: dict
  contains:
    running:
      description: Requests running.
      type: int
    queued:
      description: Requests waiting.
      type: int
    used_tokens:
      description: KV tokens in use.
      type: int
    token_usage:
      description: Share of the KV pool in use.
      type: float
live_facts:
  description: "Live facts that explain the limits: token_capacity, attn_dp_size, disaggregation_mode,
    max_req_input_len (empty unless an engine answered)."
  returned: always
  type: dict
latency:
  description:
    - "The engine's latency histograms and request counters from the same V(/metrics) read, summed over their label
      sets, since the engine started: C(ttft), C(itl), C(e2e) (each C(buckets) as [upper bound, cumulative count],
      C(count), C(sum), in seconds) and C(prompt_tokens), C(generation_tokens), C(requests)."
    - Empty without V(/metrics); a histogram the engine does not publish is absent.
  returned: always
  type: dict
  sample: {ttft: {buckets: [[0.1, 5.0], [0.2, 15.0]], count: 24.0, sum: 5.17}, requests: 24.0, prompt_tokens: 37000.0}
router:
  description: Router state; null for engines and when the router did not answer.
  returned: always
  type: dict
  contains:
    ready:
      description: V(/readiness) answered 200 with status ready.
      type: bool
    healthy_workers:
      description: Healthy workers reported by V(/readiness).
      type: int
    workers:
      description: The workers of V(/workers) (url, type, healthy).
      type: list
      elements: dict
    unhealthy_workers:
      description: The workers V(/workers) reports unhealthy (C(<type> <url>)).
      type: list
      elements: str
errors:
  description: Problems that left values unknown; each names the host and the endpoint.
  returned: always
  type: list
  elements: str
warnings_seen:
  description: Lesser problems (no V(/metrics), router not ready).
  returned: always
  type: list
  elements: str
"""

import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_in
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Transport, UrllibTransport
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_server_read import read_live


def build_transport(module: AnsibleModule) -> Transport:
    return UrllibTransport(module.params["validate_certs"])


def resolve_api_key(module: AnsibleModule) -> str | None:
    if module.params["api_key"]:
        return str(module.params["api_key"])
    path = module.params["api_key_env_file"]
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            value = api_key_in(handle.read())
    except OSError as exc:
        module.fail_json(msg=f"{module.params['name']}: cannot read api_key_env_file {path}: {exc.strerror}")
    if value:
        module.no_log_values.add(value)
    return value or None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "endpoint": {"type": "str", "required": True},
            "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "router"]},
            "api_key": {"type": "str", "no_log": True},
            "api_key_env_file": {"type": "path"},
            "timeout": {"type": "float", "default": 10},
            "validate_certs": {"type": "bool", "default": True},
            "metrics": {"type": "bool", "default": True},
            "name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if not module.params["name"]:
        module.params["name"] = socket.gethostname()
    api_key = resolve_api_key(module)
    module.exit_json(**read_live(build_transport(module), module.params, api_key, module.params["name"]))


if __name__ == "__main__":
    main()
