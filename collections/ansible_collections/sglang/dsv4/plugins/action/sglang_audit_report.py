"""Action plugin: the limits audit's report, judged and rendered on the controller, in Ansible's own process.

The report never runs on a managed host; as an action it needs no module payload (the module file,
plugins/modules/sglang_audit_report.py, documents it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import Fleet
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import build, render_text, write

ARGUMENT_SPEC: dict[str, Any] = {
    "records": {"type": "list", "elements": "dict", "required": True},
    "directory": {"type": "path", "required": True},
    "fail_on_drift": {"type": "bool", "default": True},
    "fleet": {"type": "dict"},
    "model_config": {"type": "dict"},
    "times": {"type": "dict"},
    "time_tolerance": {"type": "float", "default": 0.5},
    "time_min_requests": {"type": "int", "default": 20},
    "fronts": {"type": "dict"},
}


def report(args: Mapping[str, Any]) -> dict[str, Any]:
    """Validate the task's arguments, judge the records, write the report files; the task's result."""
    validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(json.loads(json.dumps(dict(args))))
    if validated.error_messages:
        raise AnsibleActionFail("; ".join(validated.error_messages))
    p = validated.validated_parameters
    declared = p["fleet"]
    fleet = Fleet(dict(declared["hostvars"]), dict(declared["groups"])) if declared else None
    times = p["times"] or {}
    built = build(p["records"], p["fail_on_drift"], fleet, p["model_config"], times.get("predicted") or [],
                  times.get("measured"), p["time_tolerance"], p["time_min_requests"], p["fronts"])  # fmt: skip
    try:
        files = write(built, p["directory"])
    except OSError as exc:
        raise AnsibleActionFail(f"cannot write the report into {p['directory']}: {exc}") from None
    return {
        "changed": False,
        "table": render_text(built),
        "summary": built.summary,
        "fleet": built.fleet,
        "risks": built.risks,
        "files": files,
        "directory": p["directory"],
    }


class ActionModule(ActionBase):
    """Writes only on the controller, in check mode too (the report is what the run is for)."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        result.update(report(self._task.args))
        return result
