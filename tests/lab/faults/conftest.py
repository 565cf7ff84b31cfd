"""Fixtures of the fault-injection suite: the lab deployed once and the release pinned (so that an edit of the
sources during the session cannot start a new release), and the table of fault x outcome at the end."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from faulttools import OUTCOMES, Outcome, facts, playbook


def dealt(cases: int, shares: list[int]) -> list[int]:
    """The shard (0-based) of each of `cases` cases in order: each case goes to the shard furthest below its share,
    the first of those on a tie, so shares 1,1 alternate and 7,5 give the first shard 7 cases of 12."""
    taken = [0] * len(shares)
    shards = []
    for _ in range(cases):
        shard = min(range(len(shares)), key=lambda i: (taken[i] / shares[i], i))
        taken[shard] += 1
        shards.append(shard)
    return shards


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """SGLANG_FAULT_SHARD=i/n keeps the i-th of n shards of the fault cases: `make test` runs the suite as two shards,
    each on a lab of its own (SGLANG_LAB_INVENTORY), beside each other. The cases are dealt in turn, or by
    SGLANG_FAULT_SHARES=w1,...,wn (one weight per shard) where one shard has other work after it."""
    shard = os.environ.get("SGLANG_FAULT_SHARD", "")
    if not shard:
        return
    index, count = (int(part) for part in shard.split("/"))
    if not 1 <= index <= count:
        raise pytest.UsageError(f"SGLANG_FAULT_SHARD={shard}: expected i/n with 1 <= i <= n")
    weights = os.environ.get("SGLANG_FAULT_SHARES", "")
    shares = [int(part) for part in weights.split(",")] if weights else [1] * count
    if len(shares) != count or min(shares) < 1:
        raise pytest.UsageError(f"SGLANG_FAULT_SHARES={weights}: expected {count} positive weights, one per shard")
    faults = [item for item in items if item.get_closest_marker("faults")]
    left_out = [item for item, at in zip(faults, dealt(len(faults), shares), strict=True) if at != index - 1]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture(scope="session")
def pinned() -> tuple[str, ...]:
    """Boot the lab if needed, converge it with site.yml; the extra arguments that pin its engine release."""
    if shutil.which("systemd-nspawn") is None or shutil.which("socat") is None:
        pytest.fail("the fault suite needs the lab (make apt); deselect with -m 'not faults'", pytrace=False)
    for args in (("playbooks/lab.yml",), ("site.yml",)):
        run = playbook(*args, timeout=900)
        assert run.returncode == 0, f"{' '.join(args)} exited {run.returncode}:\n{run.tail()}"
    return ("-e", f"sglang_engine_release_id={facts()['prefill']['release']}")


@pytest.fixture
def outcome(request: pytest.FixtureRequest) -> Iterator[Outcome]:
    """The row of this fault in the table printed at the end of the session."""
    row = Outcome(request.node.callspec.id if hasattr(request.node, "callspec") else request.node.name)
    OUTCOMES.append(row)
    yield row


@pytest.fixture
def audit_dir(tmp_path: Path) -> Path:
    return tmp_path


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not OUTCOMES:
        return
    rows = [("fault", "serving", "reports", "recovery", "seconds")]
    rows += [(o.fault, o.serving, o.reports, o.recovery, f"{o.seconds:.0f}") for o in OUTCOMES]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    terminalreporter.section("fault x outcome")
    for r in rows:
        terminalreporter.write_line("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    for o in OUTCOMES:
        for note in o.notes:
            terminalreporter.write_line(f"{o.fault}: {note}")
    terminalreporter.write_line(json.dumps([o.__dict__ for o in OUTCOMES]))
