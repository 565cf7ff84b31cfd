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


def _fresh_python(script: str, collections: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(collections), str(REPO / "collections")],
        cwd=REPO / "collections",
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_the_filter_plugins_are_loaded_once_in_the_main_process_for_every_worker() -> None:
    # A forked worker that names any of the collection's filters finds them through the main process's loader, with
    # plugins/filter/sglang.py already run: the fork runs no collection file again.
    if REPO.name == "mutants":
        pytest.skip("under make mutation the collection is mutmut's copy: it imports mutmut's trampolines")
    result = _fresh_python(
        """
        import importlib.util, json, os, sys
        from ansible.plugins.loader import filter_loader, init_plugin_loader
        init_plugin_loader(sys.argv[1:])
        from ansible_collections.sglang.dsv4.plugins.callback import preload
        failed = preload.preload_filters()
        ran = []
        real = importlib.util.spec_from_file_location
        importlib.util.spec_from_file_location = lambda name, *a, **k: ran.append(name) or real(name, *a, **k)
        read, write = os.pipe()
        if os.fork() == 0:
            first = filter_loader.get("sglang.dsv4.sglang_pick") is not None
            names = list(sys.modules[preload.FILTERS + ".sglang"].FilterModule().filters())
            found = [n for n in names if filter_loader.get("sglang.dsv4." + n) is not None]
            os.write(write, json.dumps({"first": first, "names": len(names), "found": len(found), "ran": ran}).encode())
            os._exit(0)
        os.wait()
        child = json.loads(os.read(read, 1 << 20))
        print(json.dumps({"failed": failed, **child}))
        """,
        REPO / "collections",
    )
    assert result["failed"] == []
    assert result["first"]
    assert result["names"] > 40
    assert result["found"] == result["names"]
    assert result["ran"] == []


def test_a_filter_file_that_fails_to_load_is_named_with_its_error(tmp_path: Path) -> None:
    filters = tmp_path / "ansible_collections" / "probe" / "coll" / "plugins" / "filter"
    filters.mkdir(parents=True)
    (filters / "good.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'probe_twice': lambda v: v * 2}\n"
    )
    (filters / "broken.py").write_text("raise RuntimeError('needs the host')\n")
    result = _fresh_python(
        """
        import json, sys
        from ansible.plugins.loader import filter_loader, init_plugin_loader
        init_plugin_loader(sys.argv[1:])
        from ansible_collections.sglang.dsv4.plugins.callback import preload
        failed = preload.preload_filters("ansible_collections.probe.coll.plugins.filter")
        print(json.dumps({"failed": failed, "twice": filter_loader.get("probe.coll.probe_twice").j2_function(21)}))
        """,
        tmp_path,
    )
    assert result == {"failed": ["ansible_collections.probe.coll.plugins.filter.broken: needs the host"], "twice": 42}
