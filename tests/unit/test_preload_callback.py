"""The preload callback imports the collection's Python in Ansible's main process, so forked task workers inherit it."""

from __future__ import annotations

import configparser
import json
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.callback import preload

REPO = Path(__file__).resolve().parents[2]


def _module_names(package: str) -> set[str]:
    module = sys.modules.get(package) or __import__(package, fromlist=["_"])
    return {f"{package}.{info.name}" for info in pkgutil.iter_modules(module.__path__)}


def test_every_module_of_both_packages_is_imported_in_a_fresh_interpreter() -> None:
    # A fresh Python: what this test session imported before does not count.
    if REPO.name == "mutants":
        pytest.skip("under make mutation the collection is mutmut's copy: it imports mutmut's trampolines")
    script = textwrap.dedent(
        """
        import json, sys
        from ansible_collections.sglang.dsv4.plugins.callback import preload
        failed = preload.preload()
        loaded = sorted(m for m in sys.modules if m.startswith(preload.PACKAGES))
        print(json.dumps({"failed": failed, "loaded": loaded}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO / "collections", capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert result["failed"] == []
    expected = set().union(*(_module_names(p) for p in preload.PACKAGES))
    assert len(expected) > 40
    assert expected <= set(result["loaded"])


def test_a_module_that_fails_to_import_is_named_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "preload_probe_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "good.py").write_text("VALUE = 1\n")
    (package / "broken.py").write_text("raise RuntimeError('needs the host')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed = preload.preload(("preload_probe_pkg",))
    assert failed == ["preload_probe_pkg.broken: needs the host"]
    assert sys.modules["preload_probe_pkg.good"].VALUE == 1


def test_the_repository_ansible_cfg_enables_it() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    enabled = [name.strip() for name in config["defaults"]["callbacks_enabled"].split(",")]
    assert preload.CallbackModule.CALLBACK_NAME in enabled
