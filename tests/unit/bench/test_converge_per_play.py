"""bench/converge.py's per-play sums of the junit callback's task times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[3] / "bench" / "converge.py"
_SPEC = importlib.util.spec_from_file_location("bench_converge", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
converge = importlib.util.module_from_spec(_SPEC)
sys.modules["bench_converge"] = converge
_SPEC.loader.exec_module(converge)


def test_tasks_are_summed_per_play_whatever_the_host_or_include() -> None:
    """Engines: 1.0 + 0.5 = 1.5 s over 2 results (a task and an include); validation: 2.0 s over 1; a task name with
    colons of its own stays in its play."""
    tasks = [
        (1.0, "[lab1] Deploy the SGLang engines: sglang.dsv4.sglang_common : Read the files: script, unit"),
        (0.5, "[include] Deploy the SGLang engines: Deploy the files, start"),
        (2.0, "[localhost] Validate the declared envelope: sglang.dsv4.sglang_validate : Fail"),
    ]
    assert converge.per_play(tasks) == {
        "Deploy the SGLang engines": (2, 1.5),
        "Validate the declared envelope": (1, 2.0),
    }
