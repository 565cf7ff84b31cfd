"""The preflight's probe (module_utils/sglang_preflight_probe.py) called in this process, each part on its own, and
its text as the preflight sends it: the file itself, runnable by a bare python3 with one JSON argument."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_preflight_probe as probe
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import PROBE
from probetools import run_probe


@pytest.fixture
def held() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


def test_the_text_sent_is_the_file() -> None:
    assert Path(probe.__file__).read_text() == PROBE


def test_a_listener_bound_taken_unresolved_and_foreign(held: int) -> None:
    assert probe.listener("127.0.0.1", 0) == {"host": "127.0.0.1", "port": 0, "family": "ipv4", "result": "bound"}
    taken = probe.listener("127.0.0.1", held)
    assert (taken["result"], taken["error"]) == ("EADDRINUSE", "EADDRINUSE: Address already in use")
    everywhere = probe.listener("*", held)
    assert everywhere["result"] == "EADDRINUSE" and everywhere["family"] in ("ipv4", "ipv6")
    assert probe.listener("no-such-host.invalid", 1)["result"] == "unresolved"
    assert probe.listener("192.0.2.1", 0)["result"] == "EADDRNOTAVAIL"


def test_a_path_read_listed_or_missing(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("{}")
    assert probe.read(str(tmp_path)) == {"path": str(tmp_path), "result": "read"}
    assert probe.read(str(tmp_path / "a.json"))["result"] == "read"
    missing = probe.read(str(tmp_path / "b.json"))
    assert (missing["result"], missing["error"]) == ("ENOENT", "ENOENT: No such file or directory")


def test_modules_found_in_a_python_or_no_python(tmp_path: Path) -> None:
    found = probe.find_modules(sys.executable, ["json", "no_such_module_x"])
    assert found == {"json": "found", "no_such_module_x": "not found"}
    nowhere = str(tmp_path / "python")
    assert probe.find_modules(nowhere, ["json"]) == {"json": f"no executable {nowhere}"}
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho boom >&2\nexit 1\n")
    broken.chmod(0o755)
    assert probe.find_modules(str(broken), ["json", "os"]) == {"json": "error: boom", "os": "error: boom"}


def test_the_startup_check_is_skipped_without_sglang() -> None:
    check = {"files": {}, "script": "x.py", "argv": [], "timeout": 5}
    assert probe.startup_check(sys.executable, check) == {"skipped": f"the release's Python {sys.executable} has no "
                                                                     "sglang"}  # fmt: skip


def test_gpus_the_unit_cannot_open_are_not_counted() -> None:
    assert probe.open_gpus([990, 991]) == 0


def test_the_answer_and_the_script(held: int, tmp_path: Path) -> None:
    spec = {"listeners": [["127.0.0.1", held]], "paths": [str(tmp_path)], "python": None, "imports": ["json"],
            "gpu_ids": []}  # fmt: skip
    answer = probe.probe(spec)
    assert list(answer) == ["user", "listeners", "paths", "imports", "gpus"]
    assert (answer["imports"], answer["gpus"], answer["paths"][0]["result"]) == ({}, None, "read")
    assert [row["result"] for row in answer["listeners"]] == ["EADDRINUSE"]
    with_python = probe.probe({**spec, "python": sys.executable, "gpu_ids": [990]})
    assert (with_python["imports"], with_python["gpus"]) == ({"json": "found"}, 0)
    assert run_probe(sys.executable, spec)["listeners"] == answer["listeners"]
