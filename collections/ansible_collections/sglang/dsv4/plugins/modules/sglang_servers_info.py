#!/usr/bin/python
"""Ansible module: the files, the process and the live limits of every SGLang server of a host, in one run."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_servers_info
short_description: Read the on-disk, running and live limits of every SGLang server of a host in one run
description:
  - "For each server in O(servers), what M(sglang.dsv4.sglang_layers_info) and M(sglang.dsv4.sglang_live_info) return
    for it: its serve script, environment file, unit and main process, and the limits it applies over HTTP."
  - One module run per host instead of two per server (the audit reads every server of a host this way). The live
    reads of the servers run at once, in threads.
  - A server that cannot be read does not stop the others; its entry in RV(servers) says why in C(failed).
  - Secrets are redacted and the API key never leaves the host. Never changes anything.
version_added: "1.4.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
options:
  servers:
    description: The servers of the host, each with the server layout's places (filter C(sglang_server_layout)).
    type: list
    elements: dict
    required: true
    suboptions:
      role:
        description: What the server is.
        type: str
        required: true
        choices: [prefill, decode, router]
      unit:
        description: The systemd unit, without C(.service). Defaults to V(sglang-dsv4-<role>).
        type: str
      script:
        description: The serve script.
        type: path
        required: true
      env_file:
        description: The environment file; the server's key (C(SGLANG_API_KEY)) is read from it unless O(api_key).
        type: path
        required: true
      unit_dir:
        description: Where the unit file is.
        type: path
        default: /etc/systemd/system
      facts_file:
        description: The local facts file written at deploy; an empty string skips it.
        type: path
        default: ""
      release_fact_file:
        description: The record of an unfinished engine release switch, read when O(servers[].releases_dir) is set.
        type: path
      releases_dir:
        description: Engine releases folder (see M(sglang.dsv4.sglang_layers_info)); omitted for the router.
        type: path
      keep_releases:
        description: How many of the newest complete releases the deploy keeps besides the linked ones.
        type: int
        default: 3
      endpoint:
        description: Base URL of the server, for example V(http://127.0.0.1:30001).
        type: str
        required: true
      metrics:
        description: Read V(/metrics) (engines); V(false) when the declaration turns metrics off.
        type: bool
        default: true
  api_key:
    description: Bearer token for every server; omitted, each server's own is read from its O(servers[].env_file).
    type: str
  timeout:
    description: Seconds to wait for each endpoint.
    type: float
    default: 10
  validate_certs:
    description: Verify TLS certificates for V(https) endpoints.
    type: bool
    default: true
  name:
    description: Host name used in messages. Defaults to the host's name.
    type: str
  prometheus_url:
    description:
      - Also ask this URL on the host once (GET), beside the servers' live reads, and return the answer in
        RV(prometheus); the audit passes its Prometheus query where Prometheus runs on an audited host.
    type: str
seealso:
  - module: sglang.dsv4.sglang_layers_info
  - module: sglang.dsv4.sglang_live_info
  - module: sglang.dsv4.sglang_audit_report
"""

EXAMPLES = r"""
- name: Read every server of an engine host
  sglang.dsv4.sglang_servers_info:
    servers:
      - role: decode
        script: /opt/sglang/bin/serve_dsv4_decode.sh
        env_file: /etc/sglang/dsv4-decode.env
        facts_file: /etc/ansible/facts.d/sglang.fact
        endpoint: http://127.0.0.1:30001
      - role: router
        script: /opt/sglang/bin/serve_dsv4_router.sh
        env_file: /etc/sglang/dsv4-router.env
        endpoint: http://127.0.0.1:8000
  register: host_servers

- name: Show the decode engine's effective per-call context
  ansible.builtin.debug:
    msg: "{{ host_servers.servers[0].live.live.context_length }} tokens per call"
"""

RETURN = r"""
servers:
  description:
    - One entry per server of O(servers), in order. C(layers) is what M(sglang.dsv4.sglang_layers_info) returns for
      it and C(live) what M(sglang.dsv4.sglang_live_info) returns; C(failed) instead says why the server could not
      be read.
  returned: always
  type: list
  elements: dict
  sample:
    - {role: decode, layers: {on_disk: {context_length: 524288}}, live: {status: ok, live: {context_length: 524288}}}
prometheus:
  description:
    - The answer of O(prometheus_url) in the shape of M(ansible.builtin.uri)'s result (C(url), C(status), C(json));
      C(status) is -1 and C(msg) says why when nothing answered. Null without O(prometheus_url).
  returned: always
  type: dict
"""

import socket
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_in
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_http import Transport, UrllibTransport, probe
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_layers import HostFiles
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_server_read import read_files, read_live

SERVER_OPTIONS: dict[str, Any] = {
    "role": {"type": "str", "required": True, "choices": ["prefill", "decode", "router"]},
    "unit": {"type": "str"},
    "script": {"type": "path", "required": True},
    "env_file": {"type": "path", "required": True},
    "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
    "facts_file": {"type": "path", "default": ""},
    "release_fact_file": {"type": "path"},
    "releases_dir": {"type": "path"},
    "keep_releases": {"type": "int", "default": 3},
    "endpoint": {"type": "str", "required": True},
    "metrics": {"type": "bool", "default": True},
}


class ReadError(Exception):
    """A server's files or process could not be read."""


def build_transport(module: AnsibleModule) -> Transport:
    return UrllibTransport(module.params["validate_certs"])


def read_server(module: AnsibleModule, server: dict[str, Any], host: HostFiles, name: str) -> dict[str, Any]:
    """The server's files and process, and the key its live read sends (O(api_key), else the one in its environment
    file); `failed` when the files or the process cannot be read."""
    entry: dict[str, Any] = {"role": server["role"]}
    try:
        entry["layers"] = read_files(server, host, name)
        env_text = host.read_text(server["env_file"])
    except ReadError as exc:
        return dict(entry, failed=str(exc))
    except OSError as exc:
        return dict(entry, failed=f"{name}: cannot read {exc.filename}: {exc.strerror}")
    key = module.params["api_key"] or (api_key_in(env_text) if env_text else None) or None
    if key:
        module.no_log_values.add(key)
    return dict(entry, key=key)


def read_all(module: AnsibleModule, host: HostFiles, transport: Transport) -> dict[str, Any]:
    """Every server of O(servers): the files one after the other, then the live reads (and O(prometheus_url)) at
    once."""
    p = module.params
    name = p["name"] or socket.gethostname()
    entries = [read_server(module, server, host, name) for server in p["servers"]]
    readable = [(entry, dict(server, timeout=p["timeout"]))
                for entry, server in zip(entries, p["servers"], strict=True) if "failed" not in entry]  # fmt: skip

    def live(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
        entry, server = pair
        entry["live"] = read_live(transport, server, entry.pop("key"), name)

    url, timeout = p["prometheus_url"], p["timeout"]
    with ThreadPoolExecutor(max_workers=len(readable) + 1) as pool:
        prometheus = pool.submit(lambda: probe(url, timeout, transport) if url else None)
        list(pool.map(live, readable))
        return {"servers": entries, "prometheus": prometheus.result()}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "servers": {"type": "list", "elements": "dict", "required": True, "options": SERVER_OPTIONS},
            "api_key": {"type": "str", "no_log": True},
            "timeout": {"type": "float", "default": 10},
            "validate_certs": {"type": "bool", "default": True},
            "name": {"type": "str"},
            "prometheus_url": {"type": "str"},
        },
        supports_check_mode=True,
    )

    def systemctl(argv: list[str]) -> str:
        rc, out, err = module.run_command(argv)
        if rc != 0:
            raise ReadError(f"{' '.join(argv)} failed (rc={rc}): {err.strip()}")
        return str(out)

    module.exit_json(changed=False, **read_all(module, HostFiles(root="/", run=systemctl), build_transport(module)))


if __name__ == "__main__":
    main()
