"""Validation rules as rows: each rule has a stable dotted id, the keys it reads, a one-line statement of the rule and
of its fix, and a check that yields the findings of one context. One interpreter runs the rows of a scope stage by
stage and writes each finding as `{var}={value!r}: {rule} [{id}]; fix: {fix}`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_argspec import choice_problem
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import overridden_keys

PORT_RANGE = (1, 65535)
NO_VALUE: Any = object()  # a finding about a whole envelope, not one value: `{var}: {rule} [{id}]; fix: {fix}`
ERROR, WARNING = "error", "warning"  # a rule's severity: its findings refuse the envelope, or are only shown


@dataclass(frozen=True)
class Finding:
    """One broken rule in one place: the variable, its value, the rule and the fix, with the numbers of the case."""

    var: str
    value: Any
    rule: str
    fix: str = ""


@dataclass(frozen=True)
class Rule:
    """One validation rule: `check(ctx)` yields its findings; a later stage runs only when the earlier found none."""

    id: str
    stage: int
    reads: tuple[str, ...]
    rule: str
    fix: str
    check: Callable[[Any], Iterable[Finding]]
    severity: str = ERROR

    @property
    def scope(self) -> str:
        return self.id.split(".", 1)[0]


def message(rule_id: str, finding: Finding) -> str:
    """The problem as validation reports it; the rule id sits in brackets right before `; fix:`."""
    head = finding.var if finding.value is NO_VALUE else f"{finding.var}={finding.value!r}"
    tail = f"; fix: {finding.fix}" if finding.fix else ""
    return f"{head}: {finding.rule} [{rule_id}]{tail}"


def findings(rows: Sequence[Rule], ctx: Any) -> list[tuple[Rule, Finding]]:
    """The findings of `rows` over `ctx` in row order, stopping after the first stage that has any."""
    found: list[tuple[Rule, Finding]] = []
    for stage in sorted({row.stage for row in rows}):
        if found:
            break
        found += [(row, f) for row in rows if row.stage == stage for f in row.check(ctx)]
    return found


def run(rows: Sequence[Rule], ctx: Any) -> list[str]:
    """The messages of `rows` over `ctx` (see findings)."""
    return [message(row.id, f) for row, f in findings(rows, ctx)]


def split_fix(text: str) -> tuple[str, str]:
    """A `rule; fix: fix` text as (rule, fix); fix is empty when the text names none."""
    rule, _sep, fix = text.partition("; fix: ")
    return rule, fix


def in_range(var: str, value: Any, low: float | None, high: float | None, rule: str, fix: str) -> Iterator[Finding]:
    """A finding when a declared number is outside [low, high] (None: open side)."""
    if value is not None and not ((low is None or value >= low) and (high is None or value <= high)):
        yield Finding(var, value, rule, fix)


def port_findings(var: str, value: Any, required: bool, what: str) -> Iterator[Finding]:
    """A missing required port (it would fall back to 30000) or one outside 1..65535."""
    if value is None and required:
        yield Finding(
            var,
            value,
            f"{what} has no port, so it would fall back to its parser's default "
            "(SGLang and smg both take 30000, which collides with another server)",
            "declare a port from 1 to 65535",
        )
    yield from in_range(
        var, value, *PORT_RANGE, "a port must be from 1 to 65535", "declare a free port from 1 to 65535"
    )


def choice_findings(role: str, env: Mapping[str, Any], var: Any) -> Iterator[Finding]:
    """String values that are not among the parser's choices for their flag."""
    for name, value in env.items():
        problem = choice_problem(role, name, value) if isinstance(value, str) else None
        if problem:
            yield Finding(var(name), value, *split_fix(problem))


OVERRIDDEN_RULE = "the deployment replaces this declared key with {instead}, so the declared value never runs"
OVERRIDDEN_FIX = {
    "api_key": "remove it and declare the key once as sglang_api_key (in the vault)",
    "disaggregation_mode": "remove it; the host's inventory group (sglang_prefill or sglang_decode) sets the mode",
}


def overridden_findings(host: str, role: str, hostvars: Mapping[str, Any]) -> Iterator[Finding]:
    """Declared keys the role replaces (sglang_declared.overridden_keys), engine or router."""
    for var, value, instead in overridden_keys(role, hostvars):
        yield Finding(
            f"{host}: {var}", value, OVERRIDDEN_RULE.format(instead=instead), OVERRIDDEN_FIX[var.split(".")[-1]]
        )
