"""The health gate's verdicts: one fixed phrase for each way a (re)started server can fail its gate, then what was
observed, in no fixed order.

Operators and tests read the verdict; the observations say what the gate saw, and which of them a given failure
shows depends on timing (a process that crashed after its gate may already have been restarted by systemd when the
gate looks again, or may still be waiting for its restart), so nothing should depend on them.

The message reads `<verdict>: <observation>; <observation>...`; the rollout's failure wraps it as
`<unit> failed its health gate after the change (<message>) and was rolled back: ...`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    id: str
    text: str
    meaning: str


VERDICTS: tuple[Verdict, ...] = (
    Verdict("start_failed", "did not start", "systemd could not (re)start the unit"),
    Verdict("not_healthy", "not healthy in time", "the health probe never passed within the gate's timeout"),
    Verdict(
        "crashed_after_gate",
        "crashed after its gate",
        "it passed the probe, then within the settle time its process stopped, exited or was restarted by systemd",
    ),
    Verdict(
        "unhealthy_after_gate",
        "unhealthy after its gate",
        "it passed the probe and its process kept running, but the probe after the settle time did not pass",
    ),
    Verdict("no_generation", "healthy but does not generate", "/health passed, a real one-token generation did not"),
)
BY_ID: dict[str, Verdict] = {v.id: v for v in VERDICTS}


def message(verdict_id: str, observations: Sequence[str]) -> str:
    """`<verdict>: <observations joined by '; '>` (the verdict alone when nothing was observed)."""
    text = BY_ID[verdict_id].text
    seen = [o for o in observations if o]
    return f"{text}: {'; '.join(seen)}" if seen else text


def probe_text(answer: Mapping[str, Any] | None, workers: Any = None) -> str:
    """What a health probe (ansible.builtin.uri's result) last answered, with the router's healthy worker count."""
    answer = answer or {}
    text = f"answered {answer.get('status', 'nothing')}"
    if workers is not None:
        healthy = (answer.get("json") or {}).get("healthy_workers", "no")
        text += f" with {healthy} of {workers} workers healthy"
    return text


def settled(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    reprobe: Mapping[str, Any] | None,
    reprobe_passed: bool,
    workers: Any = None,
    settle: Any = 0,
) -> str:
    """The verdict on a server that passed its probe and was watched for `settle` seconds: "" when it stayed up
    (same process, never restarted, answering), else the message. `before` and `after` are systemd's unit
    status (ansible.builtin.systemd_service's `status`: ActiveState, SubState, MainPID, NRestarts)."""
    crashed = []
    if after.get("ActiveState") != "active":
        crashed.append(f"stopped (now {after.get('ActiveState')}/{after.get('SubState')})")
    if str(after.get("MainPID")) != str(before.get("MainPID")):
        crashed.append(f"its process {before.get('MainPID')} exited (now {after.get('MainPID')})")
    restarts = _int(after.get("NRestarts")) - _int(before.get("NRestarts"))
    if restarts > 0:
        crashed.append(f"systemd restarted it {restarts} time(s)")
    answered = [] if reprobe_passed else [probe_text(reprobe, workers)]
    if not crashed and not answered:
        return ""
    verdict = "crashed_after_gate" if crashed else "unhealthy_after_gate"
    return message(verdict, [*crashed, *answered, f"within {settle} s"])


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
