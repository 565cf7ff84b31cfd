#!/usr/bin/python
"""Ansible module documentation: sglang_render_files is an action plugin; it runs on the controller only."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_render_files
short_description: Write rendered files into a directory on the controller
description:
  - Writes each file at O(dest_dir)/O(files[].path) on the controller, with its mode, creating the directories it
    needs; a file whose content and mode already match is not touched.
  - Runs entirely in the controller's Ansible process (an action plugin, no module run), so rendering a fleet's files
    for review (C(playbooks/render.yml)) costs no process per file. The content is usually a
    P(ansible.builtin.template#lookup) lookup.
  - Files are replaced atomically (a temporary file in the same directory, then a rename).
version_added: "1.4.0"
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sglang.dsv4.sglang
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  platform:
    platforms: posix
options:
  dest_dir:
    description: The directory on the controller the files go under.
    type: path
    required: true
  files:
    description: The files to write.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: The file's path on its host; it is joined under O(dest_dir).
        type: str
        required: true
      content:
        description: What the file holds.
        type: str
        required: true
      mode:
        description: The file's mode, as an octal string (V("0640")) or a number.
        type: raw
        required: true
      check:
        description:
          - The command that checks the file on its host, C(%s) standing for the file (V(haproxy -c -f %s)); it is
            recorded in O(dest_dir)/.sglang-checks.json, where C(playbooks/render.yml) runs it on the controller.
        type: str
        default: ""
      declared:
        description: What the checker may name in the file (a directive, a key), mapped to the declared variable.
        type: dict
        default: {}
"""

EXAMPLES = r"""
- name: Render the files of a server for review
  sglang.dsv4.sglang_render_files:
    dest_dir: "/tmp/render/{{ inventory_hostname }}"
    files:
      - path: /etc/sglang/dsv4-decode.env
        content: "{{ lookup('ansible.builtin.template', 'server.env.j2') }}"
        mode: "0640"
"""

RETURN = r"""
written:
  description: The paths written (absent from it, the files that already matched).
  returned: always
  type: list
  elements: str
  sample: ["/tmp/render/gpu-node-01/etc/sglang/dsv4-decode.env"]
"""
