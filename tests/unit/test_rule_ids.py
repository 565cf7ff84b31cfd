"""The rule ids (plugins/plugin_utils/sglang_rule_tables.py) against the case tables of the rule tests: each id is
unique, each rule is broken by at least one case, and each id a test names is a rule."""

from __future__ import annotations

import re
from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rule_tables import RULES
from test_access_exact import ACCESS
from test_component_rules_exact import COMPONENT
from test_pair_rules import PAIR_CASES
from test_sidedoor_rules_exact import SIDEDOOR, WARNINGS
from test_stack_rules_exact import STACK
from test_validate_rules_exact import BAD, ENGINE, HOST, ROUTER, UNSTATED_RULES, V32_CASES

IDS = {r.id for r in RULES}
SCOPES = "|".join(sorted({r.scope for r in RULES}))
# An id as a message carries it (after a space) or as a fragment names it (at the start of a string).
NAMED_ID = re.compile(rf"(?:^|(?<=[ \"]))\[((?:{SCOPES})\.[a-z0-9_]+)\]")


def _case_ids() -> set[str]:
    """The ids the cases name: the rule sets of the fleet, host, engine, router, side-door, stack, component and
    access cases, the pair cases' fragments."""
    tables = (BAD, V32_CASES, HOST, ENGINE, ROUTER, SIDEDOOR, WARNINGS, STACK, COMPONENT, ACCESS)
    named = {i for table in tables for case in table for i in case[-2]}
    return named | UNSTATED_RULES | {m for case in PAIR_CASES for f in case[2] for m in NAMED_ID.findall(f)}


def test_rule_ids_are_unique() -> None:
    ids = [r.id for r in RULES]
    assert len(IDS) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


def test_every_rule_is_broken_by_a_case() -> None:
    """No dead row."""
    assert IDS - _case_ids() == set()


def test_every_rule_id_a_test_names_exists() -> None:
    in_text = {
        m for path in Path(__file__).resolve().parents[1].rglob("*.py") for m in NAMED_ID.findall(path.read_text())
    }
    assert (in_text | _case_ids()) - IDS == set()
