#!/usr/bin/python
"""Ansible module: the limits a live SGLang engine or smg router applies, compared with the declaration."""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any
from urllib.error import HTTPError

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sglang_drift import compare, judge_engine
from ansible.module_utils.sglang_flags import parse_env_file
from ansible.module_utils.sglang_live import (
    Reply,
    ServerLive,
    Transport,
    TransportError,
    classify,
    read_engine,
    read_router,
    router_effective,
)
from ansible.module_utils.sglang_schema import EnvelopeError, normalize
from ansible.module_utils.urls import Request, make_context

DOCUMENTATION = r"""
---
module: sglang_limits
short_description: Read the limits a live SGLang engine or smg router applies and compare them with the declaration
description:
  - Queries one SGLang 0.5.23 engine (prefill or decode) or one smg 1.13.0 router over HTTP and normalizes the answers
    into the keys of the envelope schema (C(module_utils/sglang_schema.py)).
  - "For an engine it reads V(/server_info) (V(/get_server_info) for older engines), V(/v1/models), V(/v1/loads) and,
    unless O(metrics=false), V(/metrics). All endpoints of the server are fetched at once, in threads."
  - "Effective values come from what the engine applies, not from its echoed arguments:
    C(context_length) from V(/v1/models) C(max_model_len); C(max_total_tokens) from the top-level
    C(max_total_num_tokens) (else C(internal_states[0].memory_usage.token_capacity)); C(max_running_requests) from
    C(internal_states[0].effective_max_running_requests_per_dp) times C(attn_dp_size); the other keys from the resolved
    server arguments. C(max_queued_requests) is reported as C(<ignored>) on prefill and decode engines, since SGLang
    checks it only without disaggregation."
  - "For the router it reads V(/readiness) and V(/workers). smg does not report its own limits over HTTP: they come from
    its running argv (pass O(running), usually from M(sglang_layers)), with smg's defaults for unset flags."
  - Compares the declared envelope with the effective values and, when given, with the on-disk and running layers, and
    returns one drift item per key that leaves the declaration, with the layer where it starts and, where SGLang's
    semantics explain it, why.
  - A declared key left unset is compared with what the capacity model predicts (O(model)); for memory-profile keys such
    as C(max_total_tokens) a gap is information, not drift.
  - The raw V(/server_info) body contains the API key in plaintext. It is never returned or logged; errors name the host
    and the endpoint only.
  - Runs on the host of the server (the engines may listen on loopback only). Never changes anything.
version_added: "1.0.0"
author: SGLang DeepSeek-V4 deployment maintainers
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
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
      - Read V(/metrics). By default it is read unless the declaration sets C(enable_metrics) to V(false); a 404 only
        means the engine runs without C(--enable-metrics).
    type: bool
  declared:
    description:
      - The declared envelope of this server (schema keys). Secret values should be passed as C(<redacted>); only their
        presence is compared.
    type: dict
    default: {}
  on_disk:
    description: The on-disk layer (RV(sglang_layers#module:on_disk)), to compare all four layers.
    type: dict
  running:
    description:
      - The running layer (RV(sglang_layers#module:running)). For the router it is also the source of the effective
        limits.
    type: dict
  deployed:
    description:
      - The envelope the last deploy recorded on the host (local facts). Lets a declaration changed since the deploy
        be told apart from a file edited on the host.
    type: dict
  restart_pending:
    description: The files changed after the process started (RV(sglang_layers#module:restart_pending)).
    type: bool
    default: false
  in_progress:
    description:
      - The marker of a deploy that started and did not finish (RV(sglang_layers#module:in_progress)). A gap in the
        declared, on-disk or running layer is then reported as that interrupted deploy, not as a hand edit.
    type: dict
  expected_workers:
    description:
      - "Router only. The workers the router should have: a dict with the lists C(prefill) and C(decode) of worker
        URLs, or of dicts with a C(url) key (the shape of C(sglang_declared.workers())). Missing or unexpected workers
        are drift."
    type: dict
  model:
    description:
      - The capacity model inputs, to predict what unset keys resolve to.
      - Without it, keys the declaration leaves unset are shown but not compared.
    type: dict
    suboptions:
      config:
        description: The content of the model's C(config.json).
        type: dict
        required: true
      gpu_memory_gib:
        description: GPU memory per GPU, GiB.
        type: float
        required: true
      params_b:
        description: Parameters, billions.
        type: float
      quantization:
        description: Weight quantization (for example V(mxfp4)).
        type: str
  name:
    description: Host name used in messages. Defaults to the host's name.
    type: str
notes:
  - The module does not fail when the server does not answer; RV(status) is V(unreachable) and RV(errors) says why.
  - smg rewrites its process title, so its argv can only be recovered from the files when they did not change after it
    started (see M(sglang_layers)).
seealso:
  - module: sglang_layers
"""

EXAMPLES = r"""
- name: Read the decode engine's live limits
  sglang_limits:
    endpoint: http://127.0.0.1:30001
    role: decode
    api_key_env_file: /etc/sglang/dsv4-decode.env
    declared:
      context_length: 131072
      max_running_requests: 64
  register: decode_limits

- name: Show the effective per-call context
  ansible.builtin.debug:
    msg: "{{ decode_limits.live.context_length }} tokens per call"

- name: Compare all four layers of the router
  sglang_limits:
    endpoint: http://127.0.0.1:8000
    role: router
    declared: "{{ router_envelope }}"
    on_disk: "{{ router_layers.on_disk }}"
    running: "{{ router_layers.running }}"
    expected_workers:
      prefill: [http://127.0.0.1:30000]
      decode: [http://127.0.0.1:30001]
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
  description: The engine version from V(/server_info).
  returned: when the engine answered
  type: str
  sample: 0.5.23
live:
  description: Effective values under the envelope keys. Keys the server does not report are absent.
  returned: always
  type: dict
  sample: {context_length: 131072, max_total_tokens: 1843200, max_running_requests: 64, max_queued_requests: <ignored>}
requested:
  description: What V(/server_info) echoes for the limits (the arguments, not what is applied).
  returned: for engines
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
  description: Current load.
  returned: for engines that answered
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
    max_req_input_len."
  returned: for engines that answered
  type: dict
router:
  description: Router state.
  returned: for the router when it answered
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
    missing_workers:
      description: Expected workers the router does not have.
      type: list
      elements: str
predicted:
  description: What the capacity model predicts for this engine (empty without O(model)), including C(bf16_index_share).
  returned: always
  type: dict
rows:
  description: One row per key with the value of each layer (absent when unknown) and the layers marked drift or info.
  returned: always
  type: list
  elements: dict
  sample: [{key: context_length, limit: true, values: {declared: 131072, effective: 131072}, marks: {}}]
drift:
  description: Keys that leave the declaration.
  returned: always
  type: list
  elements: dict
  contains:
    key:
      description: Envelope key.
      type: str
    layer:
      description: Where the value first leaves the declaration (declared, on_disk, running or effective).
      type: str
    layers:
      description: Every layer whose value differs.
      type: list
      elements: str
    declared:
      description: The declared value.
      type: raw
    live:
      description: "The value at the origin layer (for V(declared): the value the last deploy wrote)."
      type: raw
    severity:
      description: V(drift), or V(info) for gaps that are information only.
      type: str
    explanation:
      description: Why, when SGLang's semantics explain it.
      type: str
  sample:
    - key: max_running_requests
      layer: effective
      layers: [effective]
      declared: 32
      live: 9
      severity: drift
      explanation: "SGLang applies min(requested // attn_dp_size, token_capacity // 2) per DP rank: ..."
drift_count:
  description: Items of RV(drift) with severity V(drift).
  returned: always
  type: int
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


API_KEY_VAR = "SGLANG_API_KEY"


class OpenUrlTransport:
    """HTTP GET through ansible.module_utils.urls.Request (what open_url uses).

    Request.open builds a TLS context (loading the CA store, tens of milliseconds) on every call unless it is
    given one: plain http gets an empty context it never uses, https one real context shared by all requests.
    """

    def __init__(self, validate_certs: bool) -> None:
        self.validate_certs = validate_certs
        self._plain = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._tls: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    def _context(self, url: str) -> ssl.SSLContext:
        if not url.startswith("https:"):
            return self._plain
        with self._lock:
            if self._tls is None:
                self._tls = make_context(validate_certs=self.validate_certs)
            return self._tls

    def get(self, url: str, headers: dict[str, str], timeout: float) -> Reply:
        try:
            resp = Request().open("GET", url, headers=dict(headers), timeout=timeout, context=self._context(url),
                                  validate_certs=self.validate_certs, follow_redirects="safe")  # fmt: skip
            return Reply(resp.getcode(), resp.read())
        except HTTPError as exc:
            return Reply(exc.code, exc.read() if exc.fp else b"")
        except TransportError:
            raise
        except Exception as exc:
            raise classify(exc) from None


def build_transport(module: AnsibleModule) -> Transport:
    return OpenUrlTransport(module.params["validate_certs"])


def resolve_api_key(module: AnsibleModule) -> str | None:
    if module.params["api_key"]:
        return str(module.params["api_key"])
    path = module.params["api_key_env_file"]
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            value = parse_env_file(handle.read()).get(API_KEY_VAR)
    except OSError as exc:
        module.fail_json(msg=f"{module.params['name']}: cannot read api_key_env_file {path}: {exc.strerror}")
    if value:
        module.no_log_values.add(value)
    return value or None


def _declared(module: AnsibleModule) -> dict[str, Any]:
    role = module.params["role"]
    try:
        return normalize(role, dict(module.params["declared"] or {}), "declared")
    except EnvelopeError as exc:
        module.fail_json(msg=f"{module.params['name']}: {exc}")
        raise  # unreachable: fail_json exits


def run(module: AnsibleModule, transport: Transport) -> dict[str, Any]:
    p = module.params
    role, name, declared = p["role"], p["name"], _declared(module)
    api_key = resolve_api_key(module)
    if role == "router":
        live = read_router(transport, p["endpoint"], api_key, p["timeout"], name, p["expected_workers"])
        return router_result(p, declared, live)
    metrics = p["metrics"] if p["metrics"] is not None else declared.get("enable_metrics") is not False
    live = read_engine(transport, p["endpoint"], role, api_key, p["timeout"], name, metrics)
    engine = live.engine
    audit, predicted, why = judge_engine(
        role, declared, engine, p["model"], on_disk=p["on_disk"], running=p["running"], deployed=p["deployed"],
        restart_pending=p["restart_pending"], in_progress=p["in_progress"],
    )  # fmt: skip
    if why:
        live.warnings.append(f"{name}: {why}; unset keys are not compared")
    out = _common(p, live, audit.as_dict(), predicted)
    if engine:
        out.update(
            version=engine.version,
            live=engine.effective,
            requested=engine.requested,
            sources=engine.sources,
            notes=engine.notes,
            load=engine.load,
            live_facts=engine.facts,
        )
    return out


def router_result(p: dict[str, Any], declared: dict[str, Any], live: ServerLive) -> dict[str, Any]:
    running = p["running"]
    effective, notes = router_effective(running) if running is not None else (None, {})
    if running is None:
        notes = {"*": "the router's argv is unknown (pass running): smg reports no limits over HTTP"}
    audit = compare(
        "router", declared, p["on_disk"], running, effective,
        deployed=p["deployed"], restart_pending=p["restart_pending"], effective_from_running=True,
        in_progress=p["in_progress"],
    ).as_dict()  # fmt: skip
    router = live.router or {}
    for label in router.get("missing_workers") or []:
        audit["drift"].append(_worker_drift(label, "missing: the router does not route to it; site.yml puts it back"))
    for label in router.get("unexpected_workers") or []:
        audit["drift"].append(_worker_drift(label, "unexpected: the inventory does not declare it"))
    out = _common(p, live, audit, {})
    out.update(live=effective or {}, notes=notes, router=router, sources={"*": "running argv + smg defaults"})
    return out


def _worker_drift(label: str, why: str) -> dict[str, Any]:
    kind, _, url = label.partition(" ")
    return {
        "key": "workers",
        "layer": "effective",
        "layers": ["effective"],
        "declared": url if why.startswith("missing") else None,
        "live": None if why.startswith("missing") else url,
        "severity": "drift",
        "explanation": f"{kind} worker {url} {why}",
    }


def _common(p: dict[str, Any], live: ServerLive, audit: dict[str, Any], predicted: dict[str, Any]) -> dict[str, Any]:
    return {
        "changed": False,
        "endpoint": p["endpoint"],
        "role": p["role"],
        "name": p["name"],
        "status": live.status,
        "reachable": live.status != "unreachable",
        "version": None,
        "live": {},
        "requested": {},
        "sources": {},
        "notes": {},
        "load": {},
        "live_facts": {},
        "predicted": predicted,
        "rows": audit["rows"],
        "drift": audit["drift"],
        "drift_count": sum(1 for d in audit["drift"] if d["severity"] == "drift"),
        "errors": live.errors,
        "warnings_seen": live.warnings,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "endpoint": {"type": "str", "required": True},
            "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "router"]},
            "api_key": {"type": "str", "no_log": True},
            "api_key_env_file": {"type": "path"},
            "timeout": {"type": "float", "default": 10},
            "validate_certs": {"type": "bool", "default": True},
            "metrics": {"type": "bool"},
            "declared": {"type": "dict", "default": {}},
            "on_disk": {"type": "dict"},
            "running": {"type": "dict"},
            "deployed": {"type": "dict"},
            "restart_pending": {"type": "bool", "default": False},
            "in_progress": {"type": "dict"},
            "expected_workers": {"type": "dict"},
            "model": {
                "type": "dict",
                "options": {
                    "config": {"type": "dict", "required": True},
                    "gpu_memory_gib": {"type": "float", "required": True},
                    "params_b": {"type": "float"},
                    "quantization": {"type": "str"},
                },
            },
            "name": {"type": "str"},
        },
        supports_check_mode=True,
    )
    if not module.params["name"]:
        module.params["name"] = socket.gethostname()
    module.exit_json(**run(module, build_transport(module)))


if __name__ == "__main__":
    main()
