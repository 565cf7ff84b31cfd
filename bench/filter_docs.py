"""Write the documentation of every filter of the collection (plugins/filter/<name>.yml, beside
plugins/filter/sglang.py, as ansible-doc reads a filter's documentation): its description from the function's
docstring, its options from the signature, and as example the collection's own first use of it in a role.

Run: .venv/bin/python bench/filter_docs.py (or `make filter-docs`); `--check` fails when a file is out of date.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import yaml

COLLECTION = Path(__file__).resolve().parents[1] / "collections" / "ansible_collections" / "sglang" / "dsv4"
FILTER_DIR = COLLECTION / "plugins" / "filter"
VERSION_ADDED = "1.9.0"


class _Literal(str):
    pass


class _Dumper(yaml.SafeDumper):
    """Lists indented under their key, as yamllint's indentation rule wants them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


_Dumper.add_representer(_Literal, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|"))


def _type(annotation: Any) -> str:
    text = str(annotation)
    for word, kind in (("Mapping", "dict"), ("dict", "dict"), ("Sequence", "list"), ("list", "list"),
                       ("bool", "bool"), ("int", "int"), ("float", "float"), ("str", "str")):  # fmt: skip
        if text.startswith(word):
            return kind
    return "raw"


def _usage(name: str) -> str | None:
    """The first line of the roles that uses the filter, as written there."""
    for path in sorted((COLLECTION / "roles").rglob("*")):
        if path.suffix not in (".yml", ".j2") or not path.is_file():
            continue
        for line in path.read_text().splitlines():
            if f"sglang.dsv4.{name}" in line:
                return f"# {path.relative_to(COLLECTION)}\n{line.strip()}\n"
    return None


def document(name: str, func: Any) -> dict[str, Any]:
    doc = inspect.getdoc(func) or ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    short = re.split(r"(?<=[.:;])\s", paragraphs[0])[0].rstrip(".:;") if paragraphs else name
    params = list(inspect.signature(func).parameters.values())
    options: dict[str, Any] = {}
    for i, param in enumerate(params):
        key = "_input" if i == 0 else param.name
        text = "The value the filter is applied to." if i == 0 else f"The filter's argument C({param.name})."
        option: dict[str, Any] = {"description": [f"{text} ({param.name} in the function)"] if i == 0 else [text]}
        option["type"] = _type(param.annotation)
        if param.default is inspect.Parameter.empty:
            option["required"] = True
        elif param.default is not None:
            option["default"] = param.default
        options[key] = option
    positional = ", ".join(p.name for p in params[1:] if p.default is inspect.Parameter.empty)
    documentation: dict[str, Any] = {
        "name": name,
        "version_added": VERSION_ADDED,
        "short_description": short[:160],
        "description": paragraphs or [name],
        "author": ["SGLang DeepSeek-V4 deployment maintainers"],
    }
    if positional:
        documentation["positional"] = positional
    documentation["options"] = options
    usage = _usage(name)
    example = usage or f'result: "{{{{ value | sglang.dsv4.{name} }}}}"\n'
    return {
        "DOCUMENTATION": documentation,
        "EXAMPLES": _Literal(example),
        "RETURN": {
            "_value": {
                "description": [f"What {func.__name__} returns."],
                "type": _type(inspect.signature(func).return_annotation),
            }
        },
    }


def render(name: str, func: Any) -> str:
    header = "---\n# Written by bench/filter_docs.py from the filter's docstring and signature; do not edit.\n"
    return header + yaml.dump(document(name, func), Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)


def filters() -> dict[str, Any]:
    """{name: function} of plugins/filter/sglang.py, loaded from its file (the package installs no filter/)."""
    spec = importlib.util.spec_from_file_location("sglang_filters", FILTER_DIR / "sglang.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.FilterModule().filters())


def main(argv: list[str]) -> int:
    stale = []
    for name, func in sorted(filters().items()):
        path = FILTER_DIR / f"{name}.yml"
        text = render(name, func)
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
    if stale:
        print("out of date (make filter-docs):\n" + "\n".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
