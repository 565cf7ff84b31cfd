"""The health gate's texts (plugin_utils/sglang_gate.py) written out whole: what a probe answered, and the verdict on a
server watched for its settle time, from systemd's unit status before and after."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_gate import probe_text, settled

UP = {"ActiveState": "active", "SubState": "running", "MainPID": "1327", "NRestarts": "2"}
REFUSED = {"status": -1, "msg": "Connection refused"}

# (the probe's answer, the router's worker count or None, the text)
PROBES = [
    (None, None, "answered nothing"),
    ({}, None, "answered nothing"),
    ({"status": 503}, None, "answered 503"),
    (None, 2, "answered nothing with no of 2 workers healthy"),
    ({"status": 200, "json": None}, 3, "answered 200 with no of 3 workers healthy"),
    ({"status": 200, "json": {}}, 3, "answered 200 with no of 3 workers healthy"),
    ({"status": 200, "json": {"healthy_workers": 0}}, 3, "answered 200 with 0 of 3 workers healthy"),
    ({"status": 200, "json": {"healthy_workers": 3}}, 3, "answered 200 with 3 of 3 workers healthy"),
]


@pytest.mark.parametrize(("answer", "workers", "text"), PROBES, ids=[p[2] for p in PROBES])
def test_what_the_probe_answered(answer: dict[str, Any] | None, workers: int | None, text: str) -> None:
    assert probe_text(answer, workers) == text


def test_the_settle_time_is_zero_unless_given() -> None:
    assert settled(UP, UP, {"status": 503}, False) == "unhealthy after its gate: answered 503; within 0 s"


def test_a_stopped_unit_names_its_state_and_substate() -> None:
    after = {**UP, "ActiveState": "failed", "SubState": "exit-code"}
    assert settled(UP, after, REFUSED, False, None, 30) == (
        "crashed after its gate: stopped (now failed/exit-code); answered -1; within 30 s"
    )


def test_a_stopped_unit_without_a_state_says_none() -> None:
    assert settled(UP, {"MainPID": "1327", "NRestarts": "2"}, None, False, None, 5) == (
        "crashed after its gate: stopped (now None/None); answered nothing; within 5 s"
    )


# (NRestarts before, NRestarts after, the restart observation or None)
RESTARTS = [
    ("2", "2", None),
    ("2", "3", "systemd restarted it 1 time(s)"),
    ("2", "5", "systemd restarted it 3 time(s)"),
    (None, "3", "systemd restarted it 3 time(s)"),
    ("n/a", "1", "systemd restarted it 1 time(s)"),
    ("4", None, None),
    ("3", "1", None),
]


@pytest.mark.parametrize(("before", "after", "seen"), RESTARTS, ids=[f"{r[0]}-{r[1]}" for r in RESTARTS])
def test_restarts_are_the_count_systemd_added_while_settling(
    before: str | None, after: str | None, seen: str | None
) -> None:
    ok = {"status": 200}
    text = settled({**UP, "NRestarts": before}, {**UP, "NRestarts": after}, ok, True, None, 15)
    assert text == (f"crashed after its gate: {seen}; within 15 s" if seen else "")


def test_restarts_counted_from_a_status_without_nrestarts() -> None:
    before = {k: v for k, v in UP.items() if k != "NRestarts"}
    assert settled(before, {**UP, "NRestarts": "1"}, {"status": 200}, True, None, 15) == (
        "crashed after its gate: systemd restarted it 1 time(s); within 15 s"
    )
