"""Every filter of the collection has its documentation file beside plugins/filter/sglang.py (what ansible-doc
shows), written from the filter's docstring and signature and up to date (make filter-docs)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("filter_docs", REPO / "bench" / "filter_docs.py")
assert spec is not None and spec.loader is not None
filter_docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filter_docs)


def test_every_filter_has_a_documentation_file_and_nothing_else_does() -> None:
    names = set(filter_docs.filters())
    files = {p.stem for p in filter_docs.FILTER_DIR.glob("*.yml")}
    assert (len(names), files) == (57, names)


def test_the_documentation_is_up_to_date() -> None:
    assert filter_docs.main(["--check"]) == 0


def test_each_documentation_describes_its_filter_and_shows_an_example() -> None:
    for name, func in filter_docs.filters().items():
        doc = yaml.safe_load((filter_docs.FILTER_DIR / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"] and func.__doc__, name
        assert f"sglang.dsv4.{name}" in doc["EXAMPLES"], name
