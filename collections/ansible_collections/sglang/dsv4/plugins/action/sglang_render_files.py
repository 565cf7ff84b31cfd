"""Action plugin: write rendered files into a directory on the controller, without running a module."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_hostfs import make_folders

ARGUMENT_SPEC: dict[str, Any] = {
    "dest_dir": {"type": "path", "required": True},
    "files": {
        "type": "list",
        "elements": "dict",
        "required": True,
        "options": {
            "path": {"type": "str", "required": True},
            "content": {"type": "str", "required": True},
            "mode": {"type": "raw", "required": True},
            "check": {"type": "str", "default": ""},
            "declared": {"type": "dict", "default": {}},
        },
    },
}


def _mode(value: Any) -> int:
    """A file mode as the roles declare it: an octal string ("0640") or an int."""
    return value if isinstance(value, int) else int(str(value), 8)


def _same(path: str, data: bytes, mode: int) -> bool:
    try:
        with open(path, "rb") as handle:
            same = handle.read() == data
        return same and (os.stat(path).st_mode & 0o7777) == mode
    except OSError:
        return False


def _write(path: str, data: bytes, mode: int) -> None:
    """Replace `path` atomically (a temporary file in its directory, then a rename)."""
    folder = os.path.dirname(path)
    make_folders(folder)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".sglang-render-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


# Beside the files of one host: {path on the host: {check, declared}}, read by the render play's last step
# (plugins/plugin_utils/sglang_filecheck.py), which runs each file's checker on the controller.
CHECKS_FILE = ".sglang-checks.json"


def _record_checks(dest_dir: str, files: list[dict[str, Any]], check_mode: bool) -> None:
    """Merge the checks of `files` into dest_dir's manifest (one host's tasks run one after the other)."""
    checks = {f["path"]: {"check": f["check"], "declared": f["declared"]} for f in files if f["check"]}
    if not checks:
        return
    path = os.path.join(dest_dir, CHECKS_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            known = json.load(handle)
    except (OSError, ValueError):
        known = {}
    merged = {**known, **checks}
    if merged != known and not check_mode:
        _write(path, json.dumps(merged, indent=1, sort_keys=True).encode(), 0o644)


class ActionModule(ActionBase):
    """Each file lands at <dest_dir>/<path> (path is the absolute path the file has on its host)."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(self._task.args)
        if validated.error_messages:
            raise AnsibleActionFail("; ".join(validated.error_messages))
        params = validated.validated_parameters
        written: list[str] = []
        for item in params["files"]:
            path = os.path.join(params["dest_dir"], item["path"].lstrip("/"))
            data = item["content"].encode()
            mode = _mode(item["mode"])
            if _same(path, data, mode):
                continue
            written.append(path)
            if not self._task.check_mode:
                _write(path, data, mode)
        _record_checks(params["dest_dir"], params["files"], self._task.check_mode)
        result.update(changed=bool(written), written=written)
        return result
