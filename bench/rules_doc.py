"""Write docs/rules.md from the validation rule tables.

Run: .venv/bin/python bench/rules_doc.py (or `make rules-doc`)
"""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_rule_tables import rules_markdown

DOC = Path(__file__).resolve().parent.parent / "docs/rules.md"


def main() -> None:
    DOC.write_text(rules_markdown())
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
