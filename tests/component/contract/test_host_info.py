"""sglang_host_info, the one-call host read the deploy compares against, run by Ansible itself on this machine and
checked against what the operating system says (stat, pwd, grp, dpkg-query, /proc/self/mountinfo)."""

from __future__ import annotations

import grp
import hashlib
import http.server
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from deploytools import REPO


def host_info(**args: Any) -> dict[str, Any]:
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local",
         "-m", "sglang.dsv4.sglang_host_info", "-a", json.dumps(args), "-o"],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.split("=>", 1)[1]))


def test_files_links_json_and_lines(tmp_path: Path) -> None:
    data = tmp_path / "a.json"
    data.write_text('{"x": 1}\nproc /proc proc defaults 0 0\n')
    data.chmod(0o640)
    (tmp_path / "link").symlink_to(data)
    (tmp_path / "dir").mkdir(mode=0o750)
    (tmp_path / "facts.json").write_text('{"decode": {"release": "r1"}}')
    got = host_info(
        files=[str(data), str(tmp_path / "link"), str(tmp_path / "dir"), str(tmp_path / "missing")],
        facts_file=str(tmp_path / "facts.json"),
        lines=[{"path": str(data), "regexp": r"^\S+\s+/proc\s+proc\s"}],
    )
    me = {"owner": pwd.getpwuid(os.getuid()).pw_name, "group": grp.getgrgid(os.getgid()).gr_name}
    sha1 = hashlib.sha1(data.read_bytes()).hexdigest()
    assert got["files"][str(data)] == {"exists": True, "isdir": False, "sha1": sha1, "mode": "0640", **me,
                                        "islnk": False, "lnk_target": None}  # fmt: skip
    assert got["files"][str(tmp_path / "link")] | {"islnk": True} == got["files"][str(tmp_path / "link")]
    assert got["files"][str(tmp_path / "link")]["lnk_target"] == str(data)
    assert got["files"][str(tmp_path / "link")]["sha1"] == sha1
    assert got["files"][str(tmp_path / "dir")]["isdir"] and got["files"][str(tmp_path / "dir")]["sha1"] is None
    assert got["files"][str(tmp_path / "dir")]["mode"] == f"{(tmp_path / 'dir').stat().st_mode & 0o7777:04o}"
    assert got["files"][str(tmp_path / "missing")]["exists"] is False
    assert got["deployed"] == {"decode": {"release": "r1"}}
    assert host_info(facts_file=str(data))["deployed"] is None  # not JSON
    assert host_info(facts_file=str(tmp_path / "missing"))["deployed"] is None
    assert got["lines"] == {str(data): ["proc /proc proc defaults 0 0"]}


def test_accounts_and_mounts() -> None:
    root = pwd.getpwnam("root")
    got = host_info(users=["root", "no-such-user-x"], groups=["root", "no-such-group-x"], mounts=["/proc", "/nowhere"])
    assert got["users"]["root"] | {"groups": []} == {
        "exists": True, "group": grp.getgrgid(root.pw_gid).gr_name, "groups": [], "home": root.pw_dir,
        "shell": root.pw_shell, "comment": root.pw_gecos,
    }  # fmt: skip
    assert sorted(got["users"]["root"]["groups"]) == sorted(g.gr_name for g in grp.getgrall() if "root" in g.gr_mem)
    assert got["users"]["no-such-user-x"]["exists"] is False
    assert got["groups"] == {"root": {"exists": True, "gid": 0}, "no-such-group-x": {"exists": False, "gid": None}}
    mounted = subprocess.run(["findmnt", "--noheadings", "--output", "OPTIONS", "--mountpoint", "/proc"],
                             capture_output=True, text=True, check=True).stdout.strip().split(",")  # fmt: skip
    assert set(mounted) <= set(got["mounts"]["/proc"])
    assert got["mounts"]["/nowhere"] is None


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian host")
def test_packages_as_dpkg_reports_them() -> None:
    got = host_info(packages=["dpkg", "no-such-package-x"])
    assert got["packages"] == {"dpkg": True, "no-such-package-x": False}


class _Endpoints(http.server.BaseHTTPRequestHandler):
    """/ready answers 200 with JSON, /starting 503 with text: a daemon's readiness endpoint and one not ready yet."""

    def do_GET(self) -> None:
        ready = self.path == "/ready"
        body = b'{"healthy_workers": 2}' if ready else b"Service Unavailable"
        self.send_response(200 if ready else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


def test_urls_are_asked_once_each_and_reported_as_uri_reports_them() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Endpoints)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nothing = f"http://127.0.0.1:{closed.getsockname()[1]}/-/ready"
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        got = host_info(urls=[f"{base}/ready", f"{base}/starting", nothing])["urls"]
    finally:
        server.shutdown()
    assert got[f"{base}/ready"] == {"url": f"{base}/ready", "status": 200, "json": {"healthy_workers": 2}}
    assert got[f"{base}/starting"] == {"url": f"{base}/starting", "status": 503, "json": None}
    assert got[nothing]["status"] == -1 and got[nothing]["msg"].startswith("unreachable"), got[nothing]
