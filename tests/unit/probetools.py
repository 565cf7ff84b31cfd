"""The preflight's probe run as the host runs it: its text (sglang_preflight.PROBE) by a Python of its own.

Under `make mutation` that text is mutmut's copy of sglang_preflight_probe.py: every mutant of it inline (too long for
one argument) and an import of mutmut. A test that runs the text skips there; the probe's parts are called in process
(test_preflight_probe.py), where the mutants are switched on."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest
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
