"""docs/rules.md is what the rule tables say now (plugins/plugin_utils/sglang_rule_tables.py)."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import NEAR_LIMITS
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rule_tables import RULES, SCOPES, rules_markdown

DOC = Path(__file__).resolve().parents[2] / "docs/rules.md"


def test_the_committed_rules_doc_is_current() -> None:
    assert DOC.read_text() == rules_markdown(), "docs/rules.md is out of date; fix: make rules-doc"


def test_every_rule_has_a_documented_scope_and_texts() -> None:
    for r in RULES:
        assert r.scope in SCOPES and r.reads and r.rule and r.fix, r.id
        assert r.id in rules_markdown(), r.id


def test_every_near_limit_alert_is_documented_with_its_share() -> None:
    doc = rules_markdown()
    for row in NEAR_LIMITS.values():
        assert f"| `{row.alert}` | {row.severity} | `{row.guards}` |" in doc, row.alert
        assert f"`sglang_monitoring_{row.share}`" in doc, row.share


def test_a_pipe_in_a_rule_text_is_escaped_so_the_table_keeps_its_columns() -> None:
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rule_tables import _cell

    assert _cell("ctx | chunk") == "ctx \\| chunk"
    assert _cell("no pipe") == "no pipe"
