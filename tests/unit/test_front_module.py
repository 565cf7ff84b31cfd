"""sglang_frontend_server run in this process against a real HAProxy (Debian's, as the front runs it) on unix sockets
in a temporary folder: its admin socket, a front and two stand-in routers (each holds a session open until its
client hangs up). Check mode
sends HAProxy nothing that changes a server; a drain asked again on a drained router sets nothing and still waits
for its sessions; the server of the same name in another backend is left alone. (The front as the role renders it,
with Ansible running the module: tests/component/frontend.)"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_haproxy
from audit.audit_helpers import load_library, run_module

FRONT_SERVER = load_library("sglang_frontend_server")

# `balance first`: every new session goes to r1 while HAProxy lets it take one (then to r2).
CONFIG = """\
global
    stats socket {dir}/admin.sock level admin
defaults
    mode tcp
    timeout connect 1s
    timeout client 60s
    timeout server 60s
frontend front
    bind unix@{dir}/front.sock
    default_backend sglang_routers
backend sglang_routers
    balance first
    server r1 unix@{dir}/r1.sock check inter 100ms rise 1 fall 1
    server r2 unix@{dir}/r2.sock check inter 100ms rise 1 fall 1
backend other_pool
    server r1 unix@{dir}/r1.sock check inter 100ms rise 1 fall 1
"""


def answers(sock: str) -> bool:
    """Whether HAProxy answers on its admin socket yet."""
    try:
        real_command(sock, "show info", 1.0)
    except sglang_haproxy.HAProxyError:
        return False
    return True


@dataclass
class Front:
    dir: Path
    sock: str
    commands: list[str]  # every runtime API command sent through sglang_haproxy, in order
    routers: dict[str, socket.socket]

    def status(self, backend: str = "sglang_routers") -> dict[str, tuple[str, int]]:
        """(status, open sessions) of each server of `backend`, as HAProxy's `show stat` gives them."""
        stats = sglang_haproxy.parse_stat(real_command(self.sock, "show stat"))
        return {server: (s.status, s.sessions) for (b, server), s in stats.items() if b == backend}

    def wait(self, want: dict[str, tuple[str, int]], backend: str = "sglang_routers") -> None:
        deadline = time.monotonic() + 15
        while (got := self.status(backend)) != want:
            assert time.monotonic() < deadline, f"HAProxy reports {got}, not {want}"
            time.sleep(0.05)

    def changes(self) -> list[str]:
        return [c for c in self.commands if not c.startswith("show ")]

    def stop(self, name: str) -> None:
        """The router stops (as the router role stops it for its restart, drained)."""
        router = self.routers.pop(name)
        router.close()
        (self.dir / f"{name}.sock").unlink()

    def start(self, name: str) -> None:
        self.routers[name] = stand_in_router(self.dir / f"{name}.sock")

    def hold(self) -> socket.socket:
        """A client session through the front, open until the returned socket is closed."""
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(self.dir / "front.sock"))
        return client


real_command = sglang_haproxy.command


def stand_in_router(path: Path) -> socket.socket:
    """A router busy with each session until the other side hangs up (HAProxy's checks connect and hang up)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(64)

    def serve(conn: socket.socket) -> None:
        with conn:
            while conn.recv(4096):
                pass

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed at the end of the test
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


@pytest.fixture
def front(monkeypatch: pytest.MonkeyPatch) -> Iterator[Front]:
    if not shutil.which("haproxy"):
        pytest.skip("haproxy is not installed (make apt)")
    where = Path(tempfile.mkdtemp(prefix="sglang-front-"))  # short: a unix socket's path has 108 bytes at most
    routers = {name: stand_in_router(where / f"{name}.sock") for name in ("r1", "r2")}
    config = where / "haproxy.cfg"
    config.write_text(CONFIG.format(dir=where))
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    commands: list[str] = []

    def recorded(path: str, text: str, timeout: float = 5.0) -> str:
        commands.append(text)
        return real_command(path, text, timeout)

    try:
        made = Front(where, str(where / "admin.sock"), commands, routers)
        deadline = time.monotonic() + 10
        while not answers(made.sock):  # the socket's file exists a moment before HAProxy listens on it
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.02)
        made.wait({"r1": ("UP", 0), "r2": ("UP", 0)})
        made.wait({"r1": ("UP", 0)}, "other_pool")
        monkeypatch.setattr(sglang_haproxy, "command", recorded)
        yield made
    finally:
        proc.terminate()
        proc.wait(10)
        for router in routers.values():
            router.shutdown(socket.SHUT_RDWR)
            router.close()
        shutil.rmtree(where)


def front_server(front: Front, state: str, server: str = "r1", **more: Any) -> dict[str, Any]:
    args = {"socket": front.sock, "backend": "sglang_routers", "server": server, "state": state, "timeout": 10}
    return run_module(FRONT_SERVER, {**args, **more})


def test_check_mode_reports_the_change_and_sends_no_command_that_changes_a_server(front: Front) -> None:
    checked = front_server(front, "drain", _ansible_check_mode=True)
    assert checked["changed"] and checked["before"] == checked["after"] == {"status": "UP", "sessions": 0}
    assert front.changes() == [] and front.status() == {"r1": ("UP", 0), "r2": ("UP", 0)}
    assert front_server(front, "drain")["changed"]
    front.commands.clear()
    checked = front_server(front, "ready", _ansible_check_mode=True)
    assert checked["changed"] and checked["after"] == {"status": "DRAIN", "sessions": 0}
    assert front.changes() == [] and front.status()["r1"] == ("DRAIN", 0)
    # Nothing to change: check mode says so too.
    assert front_server(front, "drain", _ansible_check_mode=True)["changed"] is False


def test_a_drain_stopped_before_its_sessions_ended_then_asked_again_sets_nothing_and_waits(front: Front) -> None:
    """The first drain gives up with a session still open on r1 (its timeout): r1 is left drained, r2 takes the
    new sessions. Asked again (a rerun), the drain sets nothing and returns once the session has ended."""
    client = front.hold()
    try:
        front.wait({"r1": ("UP", 1), "r2": ("UP", 0)})
        stopped = front_server(front, "drain", timeout=1)
        assert stopped["failed"], stopped
        assert "sglang_routers/r1 was not idle after 1 s (status DRAIN, 1 open session(s))" in stopped["msg"]
        assert front.changes() == ["set server sglang_routers/r1 state drain"]
        other = front.hold()  # a new session while r1 drains goes to r2
        front.wait({"r1": ("DRAIN", 1), "r2": ("UP", 1)})
        other.close()
        front.commands.clear()
        threading.Timer(1.0, client.close).start()
        again = front_server(front, "drain")
    finally:
        client.close()
    assert again["changed"] is False and again["before"] == {"status": "DRAIN", "sessions": 1}, again
    assert again["after"] == {"status": "DRAIN", "sessions": 0} and again["waited"] >= 0.5
    assert front.changes() == []


def test_ready_then_ready_again_and_the_other_backend_is_left_alone(front: Front) -> None:
    """Drain and ready of r1 in sglang_routers leave other_pool's r1 (the same name, another service) UP; a ready
    asked again sends nothing."""
    assert front_server(front, "drain")["after"] == {"status": "DRAIN", "sessions": 0}
    assert front.status("other_pool") == {"r1": ("UP", 0)}
    ready = front_server(front, "ready")
    assert ready["changed"] and ready["before"]["status"] == "DRAIN" and ready["after"]["status"] == "UP"
    assert front.changes() == ["set server sglang_routers/r1 state drain", "set server sglang_routers/r1 state ready"]
    front.commands.clear()
    assert front_server(front, "ready")["changed"] is False and front.changes() == []
    assert (front.status(), front.status("other_pool")) == ({"r1": ("UP", 0), "r2": ("UP", 0)}, {"r1": ("UP", 0)})


def test_a_server_the_backend_lacks_is_named_with_what_it_has_and_nothing_is_sent(front: Front) -> None:
    got = front_server(front, "drain", server="router-09")
    assert got["failed"] and got["msg"] == (
        "HAProxy has no server sglang_routers/router-09 (it has: other_pool/r1, sglang_routers/r1, "
        "sglang_routers/r2). The front must list every router of sglang_router (rerun roles/sglang_frontend)."
    )
    assert front.changes() == []


def test_a_drained_router_stopped_for_its_restart_is_drained_already_then_ready_waits_until_it_is_up(
    front: Front,
) -> None:
    """The middle state of a router's restart: drained, then stopped (HAProxy's check marks it DOWN, its status word
    no longer says DRAIN). A rerun's drain sets nothing and reports no change, in check mode too; the ready after the
    restart sets it ready and returns once HAProxy sees it UP."""
    front_server(front, "drain")
    front.stop("r1")
    front.wait({"r1": ("DOWN", 0), "r2": ("UP", 0)})
    front.commands.clear()
    assert front_server(front, "drain", _ansible_check_mode=True)["changed"] is False
    again = front_server(front, "drain")
    assert again["changed"] is False and again["before"] == again["after"] == {"status": "DOWN", "sessions": 0}
    assert front.changes() == []
    assert front_server(front, "ready", _ansible_check_mode=True)["changed"] is True
    threading.Timer(1.0, front.start, args=("r1",)).start()
    ready = front_server(front, "ready")
    assert ready["changed"] and ready["after"] == {"status": "UP", "sessions": 0} and ready["waited"] >= 0.5
    assert front.changes() == ["set server sglang_routers/r1 state ready"]


def test_the_state_last_set_is_read_from_haproxy_whatever_the_check_says(front: Front) -> None:
    """admin_state over HAProxy's `show servers state`: maint, drain and ready as `set server` forced them, on a
    router that is up and on one that is down."""
    for state in ("maint", "drain", "ready"):
        sglang_haproxy.set_state(front.sock, "sglang_routers", "r1", state)
        assert sglang_haproxy.admin_state(front.sock, "sglang_routers", "r1") == state
    front.stop("r1")
    front.wait({"r1": ("DOWN", 0), "r2": ("UP", 0)})
    for state in ("drain", "maint", "ready"):
        sglang_haproxy.set_state(front.sock, "sglang_routers", "r1", state)
        assert sglang_haproxy.admin_state(front.sock, "sglang_routers", "r1") == state
    assert sglang_haproxy.admin_state(front.sock, "other_pool", "r1") == "ready"
    with pytest.raises(sglang_haproxy.HAProxyError, match="'show servers state other_pool' has no server r2: 1\n#"):
        sglang_haproxy.admin_state(front.sock, "other_pool", "r2")
