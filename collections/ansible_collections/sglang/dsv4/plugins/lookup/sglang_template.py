# Copyright: the sglang.dsv4 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Render template files as ansible.builtin.template does, over the task's variables instead of a deep copy of them."""

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_template
short_description: Render template files as ansible.builtin.template does, without copying every variable first
description:
  - Returns, for each template file, the same text as C(ansible.builtin.template) (this lookup runs that lookup).
  - C(ansible.builtin.template) deep-copies all of the task's variables for each file, only to add the template's own
    variables (C(template_path), C(template_fullpath), ...) and O(template_vars). With the facts of a deploy run (the
    servers' specs, the host's read, the preflight's list) that copy cost 50 to 80 ms a file on the lab.
  - This lookup hands it the task's variables under an empty top layer instead. The template's own variables go into
    that layer, so the task's variables are neither copied nor changed.
options:
  _terms:
    description: The template files, found as C(ansible.builtin.template) finds them (the role's C(templates/) first).
    required: true
  template_vars:
    description: Variables for the templates only, over the task's.
    type: dict
    default: {}
  variable_start_string:
    description: What opens an expression.
    type: str
    default: "{{"
  variable_end_string:
    description: What closes an expression.
    type: str
    default: "}}"
  comment_start_string:
    description: What opens a comment.
    type: str
    default: "{#"
  comment_end_string:
    description: What closes a comment.
    type: str
    default: "#}"
  trim_blocks:
    description: Drop the first newline after a block tag.
    type: bool
    default: true
seealso:
  - plugin: ansible.builtin.template
    plugin_type: lookup
"""

EXAMPLES = r"""
- name: The checksum of the rendered unit (roles/sglang_common/tasks/server.yml)
  ansible.builtin.debug:
    msg: "{{ lookup('sglang.dsv4.sglang_template', 'server.service.j2') | hash('sha1') }}"
"""

RETURN = r"""
_raw:
  description: The text of each rendered template, as C(ansible.builtin.template) renders it.
  type: list
  elements: str
"""

from collections import ChainMap
from collections.abc import Mapping, MutableMapping
from typing import Any, cast

from ansible.plugins.lookup.template import LookupModule as TemplateLookup


class _TaskVariables(ChainMap):  # type: ignore[type-arg]
    """The task's variables; what ansible.builtin.template deep-copies is a new empty layer over them (a plain
    ChainMap: Ansible's template engine takes exactly that type as layered variables)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> ChainMap[str, Any]:
        return ChainMap({}, *self.maps)


class LookupModule(TemplateLookup):
    def run(self, terms: list[Any], variables: Mapping[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        # Only the new top layer is ever written: the task's variables may be any mapping.
        task_vars = cast(MutableMapping[str, Any], variables if variables is not None else {})
        return super().run(terms, _TaskVariables(task_vars), **kwargs)
