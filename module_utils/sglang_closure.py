"""Which of this package's modules a module needs: the closure of its imports of sibling modules.

Code that ships part of the package to a host (the drift exporter, the verify snapshot) ships this closure, so that
a module split or added is shipped without a list to keep by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent
# A sibling import in either of the two forms each module uses (inside Ansible, and as a package).
_SIBLING = re.compile(r"^\s*from (?:ansible\.module_utils\.|\.)(\w+) import", re.M)


def closure(*entries: str, package: Path = HERE) -> list[str]:
    """Module names (without .py) that `entries` import directly or indirectly, the entries included, sorted."""
    seen: set[str] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = package / f"{name}.py"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such module in {package}")
        seen.add(name)
        todo.extend(m for m in _SIBLING.findall(path.read_text()) if (package / f"{m}.py").is_file())
    return sorted(seen)
