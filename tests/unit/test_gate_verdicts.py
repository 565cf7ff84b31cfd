"""The health gate's verdicts (sglang_gate): each way of failing after the gate gets its fixed verdict, whichever of
its observations the timing lets the gate see."""

from __future__ import annotations

from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_gate

UP = {"ActiveState": "active", "SubState": "running", "MainPID": "1327", "NRestarts": "0"}
OK = {"status": 200, "json": {"healthy_workers": 2}}
REFUSED = {"status": -1, "msg": "Connection refused"}


def settled(after: dict[str, Any], reprobe: dict[str, Any], workers: Any = None) -> str:
    passed = reprobe.get("status") == 200 and (workers is None or reprobe["json"]["healthy_workers"] == workers)
    return sglang_gate.settled(UP, after, reprobe, passed, workers, 15)


# One crash loop, seen at three moments of systemd's restart cycle: each is the same verdict.
CRASH_SIGHTINGS = {
    "waiting for its restart": (
        {**UP, "ActiveState": "activating", "SubState": "auto-restart", "MainPID": "0"},
        REFUSED,
    ),
    "restarted, not yet answering": ({**UP, "MainPID": "1373", "NRestarts": "1"}, {"status": 503}),
    "restarted and answering": ({**UP, "MainPID": "1373", "NRestarts": "1"}, OK),
    "stopped for good": ({**UP, "ActiveState": "failed", "SubState": "failed", "MainPID": "0"}, REFUSED),
}


@pytest.mark.parametrize("sighting", CRASH_SIGHTINGS)
def test_a_crash_after_the_gate_has_one_verdict_whatever_the_timing(sighting: str) -> None:
    after, reprobe = CRASH_SIGHTINGS[sighting]
    text = settled(after, reprobe)
    assert text.startswith("crashed after its gate: "), text
    assert text.endswith("within 15 s"), text


def test_the_observations_follow_the_verdict() -> None:
    after, reprobe = CRASH_SIGHTINGS["restarted, not yet answering"]
    assert settled(after, reprobe) == (
        "crashed after its gate: its process 1327 exited (now 1373); systemd restarted it 1 time(s); "
        "answered 503; within 15 s"
    )


def test_same_process_not_answering_is_unhealthy_not_crashed() -> None:
    assert settled(dict(UP), {"status": 503}) == "unhealthy after its gate: answered 503; within 15 s"


def test_router_missing_workers_after_the_gate() -> None:
    reprobe = {"status": 200, "json": {"healthy_workers": 1}}
    assert settled(dict(UP), reprobe, workers=2) == (
        "unhealthy after its gate: answered 200 with 1 of 2 workers healthy; within 15 s"
    )


def test_a_server_that_stayed_up_has_no_verdict() -> None:
    assert settled(dict(UP), OK) == ""
    assert settled(dict(UP), OK, workers=2) == ""


def test_every_verdict_is_distinct_and_messages_start_with_it() -> None:
    texts = [v.text for v in sglang_gate.VERDICTS]
    assert len(set(texts)) == len(texts)
    assert not any(a != b and b.startswith(a) for a in texts for b in texts), "a verdict is a prefix of another"
    for verdict in sglang_gate.VERDICTS:
        assert sglang_gate.message(verdict.id, ["x"]) == f"{verdict.text}: x"
        assert sglang_gate.message(verdict.id, []) == verdict.text
