"""The preflight's read check as the unit's user meets the paths: the host-side probe
(module_utils/sglang_preflight_probe.py) run by the host's python3 as a system user made for the test (runuser, as
systemd runs the unit's process with User=), and its answer judged. As root every file is readable, so these cases
exist only for another user."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_preflight import server_problems
from probetools import run_probe
from unituser import UnitUser, unit_user

HOST_PYTHON = "/usr/bin/python3"  # the probe is stdlib only and runs in the host's python3


@pytest.fixture
def user() -> Iterator[UnitUser]:
    with unit_user() as made:
        yield made


@pytest.fixture
def place() -> Iterator[Path]:
    """A folder every user may enter (pytest's own tmp folder is root's alone)."""
    where = Path(tempfile.mkdtemp(prefix="sglang-preflight-user-"))
    where.chmod(0o755)
    yield where
    shutil.rmtree(where)


def probe_as(user: UnitUser, **spec: Any) -> dict[str, Any]:
    return run_probe(HOST_PYTHON, spec, ["runuser", "-u", user.name, "--"])


def made(path: Path, mode: int, owner: int = 0, text: str = "{}") -> str:
    path.write_text(text)
    os.chown(path, owner, owner)
    path.chmod(mode)
    return str(path)


def test_the_probe_reads_as_the_unit_user_and_the_judge_names_each_path(user: UnitUser, place: Path) -> None:
    """root's 0600 file and a folder of mode 0311 (enter, not list) are EACCES; a file under root's 0700 folder is
    hidden (EACCES on the way there); a missing file is ENOENT. A 0644 file of root's, the user's own 0400 file (read,
    not write: the read check asks nothing more) and a folder it may list are read."""
    private = place / "private"
    private.mkdir(mode=0o700)
    listed, shut = place / "listed", place / "shut"
    listed.mkdir(mode=0o755)
    shut.mkdir()
    shut.chmod(0o311)
    paths = [
        made(place / "root-only.json", 0o600),
        str(shut),
        made(private / "config.json", 0o644),
        str(place / "missing.json"),
        made(place / "shared.json", 0o644),
        made(place / "own-read-only.json", 0o400, user.uid),
        str(listed),
    ]
    answer = probe_as(user, paths=paths)
    assert answer["user"] == user.uid
    assert [row["result"] for row in answer["paths"]] == ["EACCES", "EACCES", "EACCES", "ENOENT", "read", "read",
                                                          "read"]  # fmt: skip
    declared = ["sglang_model.path", "sglang_decode.download_dir", "sglang_model.config", "sglang_model.tokenizer",
                "a", "b", "c"]  # fmt: skip
    server = {"role": "decode", "unit": "sglang-dsv4-decode", "user": user.name, "path_vars": declared}
    problems = server_problems(server, answer, lambda port: [])
    assert len(problems) == 4
    for problem, path, variable in zip(problems, paths, declared, strict=False):
        assert problem.startswith(f"sglang-dsv4-decode: {path} ({variable}) "), problem
        assert f"with read access for {user.name}, and declare that path in {variable}." in problem
    assert [f"is not readable by the unit's user {user.name}" in p for p in problems] == [True, True, True, False]
    assert "does not exist as the unit sees it" in problems[3]


def test_the_same_paths_are_read_by_root(place: Path) -> None:
    """The contrast: run as root (the tests' own user), the probe reads every one of them."""
    if os.geteuid() != 0:
        pytest.skip("runs as root")
    private = place / "private"
    private.mkdir(mode=0o700)
    paths = [made(place / "root-only.json", 0o600), made(private / "config.json", 0o644)]
    assert [row["result"] for row in run_probe(HOST_PYTHON, {"paths": paths})["paths"]] == ["read", "read"]


def test_a_low_port_is_refused_to_the_unit_user(user: UnitUser) -> None:
    """Ports below the host's unprivileged start (1024 unless the host lowers it) need root or
    CAP_NET_BIND_SERVICE: as the unit's user the bind is EACCES, and the judge names the declared port."""
    start = int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    if start <= 1:
        pytest.skip("this host lets any user bind any port")
    answer = probe_as(user, listeners=[["127.0.0.1", start - 1]])
    assert [row["result"] for row in answer["listeners"]] == ["EACCES"]
    server = {"role": "router", "unit": "sglang-dsv4-router", "user": user.name, "path_vars": []}
    problems = server_problems(server, answer, lambda port: [])
    assert problems == [
        f"sglang-dsv4-router: the unit's user {user.name} may not bind 127.0.0.1:{start - 1} (sglang_router.port = "
        f"{start - 1}): ports below 1024 need root or CAP_NET_BIND_SERVICE. Declare a port of 1024 or above in "
        "sglang_router.port."
    ]


def test_a_folder_the_user_may_list_but_not_enter_is_refused(user: UnitUser, place: Path) -> None:
    """A model folder of mode 0744 (read without search for others): the unit's user lists its names, yet opens no
    file in it, as SGLang must to load the model. The probe enters it, as SGLang does, and answers EACCES."""
    model = place / "model"
    model.mkdir()
    inside = made(model / "config.json", 0o644)
    model.chmod(0o744)
    answer = probe_as(user, paths=[str(model), inside])
    assert [row["result"] for row in answer["paths"]] == ["EACCES", "EACCES"], answer
    model.chmod(0o755)
    assert [row["result"] for row in probe_as(user, paths=[str(model), inside])["paths"]] == ["read", "read"]


@pytest.fixture
def models_group(user: UnitUser) -> Iterator[str]:
    """A group the unit's user is a member of besides its own (a `models` group that owns the weights)."""
    if not shutil.which("groupadd") or not shutil.which("setpriv"):
        pytest.skip("needs groupadd and setpriv")
    name = f"sglm{os.getpid()}"
    subprocess.run(["groupadd", "--system", name], check=True, capture_output=True)
    try:
        subprocess.run(["usermod", "--append", "--groups", name, user.name], check=True, capture_output=True)
        yield name
    finally:
        subprocess.run(["groupdel", name], check=False, capture_output=True)


def test_a_model_readable_through_a_supplementary_group_is_read(user: UnitUser, place: Path, models_group: str) -> None:
    """Weights of root's, mode 0640 in a folder of mode 0750, both of the group models the unit's user belongs to:
    the unit's process has its user's groups (systemd's User=, as runuser), and reads them. The contrast: the same
    user without its supplementary groups (setpriv --clear-groups) may not."""
    gid = grp.getgrnam(models_group).gr_gid
    model = place / "model"
    model.mkdir()
    weights = made(model / "model.safetensors", 0o640)
    for path, mode in ((weights, 0o640), (str(model), 0o750)):
        os.chown(path, 0, gid)
        os.chmod(path, mode)
    assert [row["result"] for row in probe_as(user, paths=[str(model), weights])["paths"]] == ["read", "read"]
    bare = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
    answer = run_probe(HOST_PYTHON, {"paths": [str(model), weights]}, bare)
    assert (answer["user"], [row["result"] for row in answer["paths"]]) == (user.uid, ["EACCES", "EACCES"])
