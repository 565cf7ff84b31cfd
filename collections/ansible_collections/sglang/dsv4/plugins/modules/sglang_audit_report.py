#!/usr/bin/python
"""Ansible module, documentation only: its action plugin (plugins/action/sglang_audit_report.py) renders the audit."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_audit_report
short_description: Render the SGLang limits audit as a console table, Markdown, JSON and SVG charts
description:
  - Takes one record per server and role (the results of M(sglang.dsv4.sglang_layers_info) and
    M(sglang.dsv4.sglang_live_info) with what the server is declared to be, or the reason the host could not be read),
    judges each on the controller (plugins/module_utils/sglang_drift.py C(judge), the same judge the verify suite and
    the drift exporter use) and renders, per server, a table of every limit against the four layers (declared, on disk,
    running, effective) with the drifting cells marked, the drift with its explanations, the current load, and the
    capacity derived from the live KV pool (concurrent full-length requests at the effective context length, the share
    of the pool that bf16 index keys cost).
  - Across the fleet it names the binding limit on parallel calls (the router's C(max_concurrent_requests) against what
    the decode engines run at once) and what happens beyond it (router queue, then HTTP 429).
  - Writes C(audit.json), C(audit.md), C(audit.txt) and one SVG chart per engine into O(directory). Meant to run on the
    controller (C(localhost)); it writes only there, also in check mode, and reports no change.
  - It is an action plugin, which runs inside the controller's Ansible process; no module payload is built or shipped.
  - Does not fail on drift; RV(summary.failed) tells the playbook whether to.
version_added: "1.0.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - sglang.dsv4.sglang
attributes:
  check_mode:
    details: The report files are written in check mode too; nothing else is touched.
options:
  records:
    description:
      - One dict per server and role with keys C(host), C(role), C(layers) (registered M(sglang.dsv4.sglang_layers_info)
        result), C(live) (registered M(sglang.dsv4.sglang_live_info) result), C(declared) (the server's declared
        envelope, secrets as C(<set>)), and optionally C(model) (the capacity model's inputs, filter
        C(sglang_model_inputs)), C(declared_files) (owner, group and mode the roles declare for the script, the
        environment file and the unit), C(expected_workers) (the router's workers, filter C(sglang_workers)),
        C(host_unreachable) or C(failed) (a message).
    type: list
    elements: dict
    required: true
  directory:
    description: Folder to write the report into; created if missing.
    type: path
    required: true
  fail_on_drift:
    description: Whether drift sets RV(summary.failed). Unreachable hosts and errors always do.
    type: bool
    default: true
  fleet:
    description:
      - The declared fleet, C(hostvars) (the C(sglang_*) variables of each host, secrets left out) and C(groups), so
        that each risk found in the live values comes with fixes as envelope diffs that the fleet validation passed.
      - Without it the risks are reported without fixes.
    type: dict
  model_config:
    description: The served model's C(config.json), for the capacity model behind the fixes.
    type: dict
  times:
    description:
      - The time model and the measured latency (filter C(sglang.dsv4.sglang_audit_times), one call for both).
      - C(predicted), the model's predictions for the declared fleet, each with C(shape), C(ttft_p50), C(ttft_p90),
        C(itl_p50), C(itl_p90), C(binding) (text, each time with its band and source), or C(shape) and
        C(unavailable) (why nothing was predicted).
      - C(measured), the fleet's measured latency per engine role, from Prometheus over a window or from the engines'
        C(/metrics) since they started, with C(at_load), the model's prediction at the measured load.
      - Both are printed in the fleet section, with the ratio and the source of each figure; a measured TTFT or ITL
        p50 off the prediction by more than O(time_tolerance) is the risk C(measured_time_off_model).
    type: dict
    version_added: "1.8.0"
  time_tolerance:
    description: How far a measured TTFT or ITL p50 may lie from the model's prediction (0.5 is +-50 %).
    type: float
    default: 0.5
  time_min_requests:
    description: Finished requests a measured figure needs before it is judged against the model.
    type: int
    default: 20
  fronts:
    description:
      - Per host of the HAProxy front (group C(sglang_frontend)) what M(sglang.dsv4.sglang_frontend_info) read there
        (C(servers)), or its failed or unreachable result. Each declared router is judged C(in) (up), C(out)
        (down, drained or in maintenance), C(missing) (not listed), and a listed server that is no router
        C(undeclared); anything but C(in), or a front not read, fails the audit with O(fail_on_drift).
    type: dict
seealso:
  - module: sglang.dsv4.sglang_live_info
  - module: sglang.dsv4.sglang_layers_info
"""

EXAMPLES = r"""
- name: Write the audit report
  sglang.dsv4.sglang_audit_report:
    records: "{{ audit_records }}"
    directory: "{{ playbook_dir }}/../reports/audit-{{ stamp }}"
  register: report

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ report.table.splitlines() }}"
"""

RETURN = r"""
table:
  description: The console rendering (one table per server, drift, load, capacity, fleet summary).
  returned: always
  type: str
summary:
  description: Counts of servers by status and whether the audit fails.
  returned: always
  type: dict
  contains:
    servers:
      description: Servers audited.
      type: int
    ok:
      description: Servers without drift or errors.
      type: int
    drift:
      description: Servers with drift.
      type: int
    drift_items:
      description: Drift items over all servers.
      type: int
    unreachable:
      description: Servers whose host or endpoint did not answer.
      type: int
    error:
      description: Servers with errors (401, malformed answers, failed reads).
      type: int
    front_out:
      description: Routers not in a front (out, missing or undeclared there) plus fronts not read.
      type: int
    failed:
      description: Unreachable servers, errors, or drift or routers out of a front when O(fail_on_drift).
      type: bool
fleet:
  description:
    - The binding limit on parallel calls and the router and decode figures it comes from.
    - C(predicted_time) and C(measured_time) when given (the measured latency and the model at the measured load).
  returned: always
  type: dict
risks:
  description:
    - Combinations in the live envelope that will hurt under load, most severe first; each with C(id), C(severity)
      (info, warn, critical), C(summary), C(numbers), C(servers) and C(fixes) (C(title), C(diff), C(valid)).
  returned: always
  type: list
  elements: dict
files:
  description: Paths written, by kind (json, markdown, text, chart:<name>).
  returned: always
  type: dict
directory:
  description: The report folder.
  returned: always
  type: str
"""
