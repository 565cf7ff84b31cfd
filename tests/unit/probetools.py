"""The preflight's probe run as the host runs it: its text (sglang_preflight.PROBE) by a Python of its own.

Under `make mutation` that text is mutmut's copy of sglang_preflight_probe.py: every mutant of it inline (too long for
one argument) and an import of mutmut. A test that runs the text skips there; the probe's parts are called in process
(test_preflight_probe.py), where the mutants are switched on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_preflight_probe
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import PROBE, probe_argv


def run_probe(
    python: str, spec: dict[str, Any], runner: Sequence[str] = (), env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The probe's answer to `spec`, run by `python` (after `runner`, e.g. runuser -u USER --; in `env`)."""
    if "mutmut" in PROBE:
        pytest.skip("the probe's text is mutmut's copy of it (every mutant inline, an import of mutmut)")
    full = {"listeners": [], "paths": [], "python": None, "imports": [], "gpu_ids": [], **spec}
    run = subprocess.run([*runner, *probe_argv(python, full)], capture_output=True, text=True, timeout=60, check=False,
                         env=env, stdin=subprocess.DEVNULL)  # fmt: skip
    assert run.returncode == 0, run.stderr
    return dict(json.loads(run.stdout))


def probe_server(**changes: Any) -> dict[str, Any]:
    """One server's options of the sglang_preflight module: a decode engine run as root, with nothing to check."""
    server = {"role": "decode", "unit": "sglang-dsv4-decode", "service": {"User": "root"}, "environment": "",
              "listeners": [], "paths": [], "path_vars": [], "python": None, "imports": {}, "gpu_ids": [],
              "sglang_argv": []}  # fmt: skip
    return {**server, **changes}


def fake_systemd_run(
    statuses: list[int | BaseException], names: list[str], env_files: list[tuple[str, int, str]] | None = None
) -> Any:
    """subprocess.run for the module: each systemd-run answers the next exit status of `statuses` (or raises it); 0
    answers what the probe answers to the spec that follows it on the command line (the probe called in this
    process). `names` gets each transient unit's name, and any other command as a line; `env_files` each
    EnvironmentFile= as the call found it (path, mode, text)."""

    def run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if argv[0] != "systemd-run":  # systemctl stop of a unit that did not answer
            names.append(" ".join(argv))
            return subprocess.CompletedProcess(argv, 0, "", "")
        names.append(next(a for a in argv if a.startswith("--unit=")))
        if env_files is not None:
            path = next(a for a in argv if a.startswith("--property=EnvironmentFile=")).split("=", 2)[2]
            with open(path, encoding="utf-8") as text:
                env_files.append((path, os.stat(path).st_mode & 0o7777, text.read()))
        status = statuses.pop(0)
        if isinstance(status, BaseException):
            raise status
        if status:
            return subprocess.CompletedProcess(argv, status, "", "")
        assert argv[argv.index("--") + 1 :][:4] == [sys.executable, "-I", "-c", PROBE]
        return subprocess.CompletedProcess(argv, 0, json.dumps(sglang_preflight_probe.probe(json.loads(argv[-1]))), "")

    return run
