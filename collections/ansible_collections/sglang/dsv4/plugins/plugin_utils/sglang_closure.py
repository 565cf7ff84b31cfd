"""Which of the core's host-side modules (module_utils) a program needs: the closure of its imports of them.

Code that ships part of the core to a host (the drift exporter, the verify snapshot) ships this closure under the
core's own import name (PACKAGE), so that a module split or added is shipped without a list to keep by hand. This
module itself runs on the controller only (plugin_utils); it reads the module_utils folder beside its own.
"""

from __future__ import annotations

import re
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "module_utils"
PACKAGE = __name__.rsplit(".", 2)[0] + ".module_utils"  # ansible_collections.sglang.dsv4.plugins.module_utils
# `from .x import ...` inside the package, `from <PACKAGE>.x import ...` and `from <PACKAGE> import x, y` outside it.
_FROM_MODULE = re.compile(r"^\s*from (?:\.|" + re.escape(PACKAGE) + r"\.)(\w+) import", re.M)
_FROM_PACKAGE = re.compile(r"^\s*from " + re.escape(PACKAGE) + r" import (?:\(([\w\s,]+)\)|([\w ,]+)$)", re.M)


def imports_of(source: str) -> list[str]:
    """The package's modules that the Python `source` imports directly, in order."""
    names = _FROM_MODULE.findall(source)
    for group in _FROM_PACKAGE.findall(source):
        names += [item.split()[0] for item in "".join(group).split(",") if item.strip()]
    return names


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
        todo.extend(m for m in imports_of(path.read_text()) if (package / f"{m}.py").is_file())
    return sorted(seen)


def program_closure(program: Path | str) -> list[str]:
    """The package's modules a program outside it needs: the closure of what the file imports."""
    return closure(*imports_of(Path(program).read_text()))
