"""sglang.dsv4.sglang_template renders what ansible.builtin.template renders, without deep-copying the task's
variables (the roles render every server file through it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "collections/ansible_collections/sglang/dsv4/roles"

TEMPLATES = {
    "plain.j2": "{{ x }} from {{ template_path | basename }} (host {{ template_host | length > 0 }})\n",
    "loop.j2": "{% for i in items %}\n- {{ i.name }}={{ i.value | default('none') }}\n{% endfor %}\n"
               "{% set x = 5 %}{{ x }}\n",
    "include.j2": "head\n{% include 'plain.j2' %}tail {{ extra | default('no extra') }}\n",
    "delimiters.j2": "[% x %] {{ not an expression }} [# a comment #]\n",
}  # fmt: skip
CASES = [
    ("plain.j2", {}),
    ("loop.j2", {}),
    ("loop.j2", {"trim_blocks": False}),
    ("include.j2", {"template_vars": {"extra": "given"}}),
    ("delimiters.j2", {"variable_start_string": "[%", "variable_end_string": "%]",
                       "comment_start_string": "[#", "comment_end_string": "#]"}),
    ("absent.j2", {}),
    ("plain.j2", {"drop": "x"}),
]  # fmt: skip

# Both lookups through Ansible's own plugin loader, in a fresh interpreter (the loader is set up once per process).
# Each case: the text or the error of each; then the deep-copy probe: a fact whose deep copy fails.
RUNNER = """
import copy, json, sys
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, lookup_loader
from ansible.template import Templar
init_plugin_loader([sys.argv[1]])
folder, cases = sys.argv[2], json.loads(sys.argv[3])
loader = DataLoader()
templar = Templar(loader=loader)
lookups = {name: lookup_loader.get(name, loader=loader, templar=templar)
           for name in ("sglang.dsv4.sglang_template", "ansible.builtin.template")}

def variables(drop=None):
    found = {"x": 1, "items": [{"name": "a", "value": 2}, {"name": "b"}], "ansible_search_path": [folder]}
    found.pop(drop, None)
    return found

def outcome(lookup, name, options, task_vars):
    try:
        return {"text": lookup.run([name], task_vars, **options)}
    except Exception as exc:
        return {"error": type(exc).__name__, "message": str(getattr(exc, "message", exc))}

class NoDeepCopy:
    def __deepcopy__(self, memo):
        raise RuntimeError("the task's variables were deep-copied")

out = {"cases": [], "probe": {}}
for name, options in cases:
    drop = options.pop("drop", None)
    out["cases"].append({which: outcome(lookup, name, options, variables(drop)) for which, lookup in lookups.items()})
for which, lookup in lookups.items():
    task_vars = variables() | {"big_fact": NoDeepCopy()}
    before = sorted(task_vars)
    result = outcome(lookup, "include.j2", {"template_vars": {"extra": "given"}}, task_vars)
    out["probe"][which] = result | {"unchanged": sorted(task_vars) == before}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("templates")
    for name, text in TEMPLATES.items():
        (folder / name).write_text(text)
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUNNER), str(REPO / "collections"), str(folder), json.dumps(CASES)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{n}-{'-'.join(o)}" for n, o in CASES])
def test_it_renders_or_fails_as_ansible_builtin_template_does(rendered: dict[str, Any], case: int) -> None:
    ours, theirs = (
        rendered["cases"][case]["sglang.dsv4.sglang_template"],
        rendered["cases"][case]["ansible.builtin.template"],
    )
    assert ours == theirs
    assert theirs["text"][0].strip() if "text" in theirs else theirs["message"]


def test_a_missing_file_and_an_undefined_variable_are_errors_in_both(rendered: dict[str, Any]) -> None:
    absent, undefined = (rendered["cases"][i]["sglang.dsv4.sglang_template"] for i in (5, 6))
    assert "could not be found for the lookup" in absent["message"]
    assert "'x' is undefined" in undefined["message"]


def test_the_task_variables_are_neither_deep_copied_nor_changed(rendered: dict[str, Any]) -> None:
    assert rendered["probe"]["ansible.builtin.template"]["message"].endswith("the task's variables were deep-copied")
    # The same text as both render for that template without the probe (case 3).
    expected = rendered["cases"][3]["ansible.builtin.template"]["text"]
    assert expected == ["head\n1 from include.j2 (host True)tail given\n"]
    assert rendered["probe"]["sglang.dsv4.sglang_template"] == {"text": expected, "unchanged": True}


def test_the_roles_render_their_files_through_it() -> None:
    builtin = re.compile(r"lookup\(\s*'(ansible\.builtin\.)?template'")
    users = {
        p.relative_to(ROLES).parts[0] for p in ROLES.rglob("*.yml") if "sglang.dsv4.sglang_template" in p.read_text()
    }
    assert [p for p in ROLES.rglob("*.yml") if builtin.search(p.read_text())] == []
    assert users >= {"sglang_common", "sglang_monitoring", "sglang_frontend", "sglang_lab"}
