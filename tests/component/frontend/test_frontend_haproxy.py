"""The front (roles/sglang_frontend) as Debian's HAProxy 2.6 runs it: its configuration rendered by Ansible from the
role's template and checked by `haproxy -c`, then a real HAProxy in front of two stand-in routers on loopback.
sglang_frontend_server drains a router through HAProxy's admin socket and puts it back, as the router role does
before and after a restart; a router that dies, or closes a request without an answer, costs the client nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from deploytools import REPO

ROLE = REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_frontend"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Router:
    """A stand-in router: /readiness 200, POST /generate answers after `delay` s naming itself (and, with `hold`, once
    the test sets it); `close` makes it hang up on the next call without an answer."""

    name: str
    delay: float = 0.3
    close: bool = False
    hold: threading.Event | None = None
    calls: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self, port: int = 0) -> int:
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self.answer(b'{"ready": true}')

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if router.close:
                    router.close = False
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                router.calls.append(self.path)
                if router.hold is not None:
                    router.hold.wait(60)
                time.sleep(router.delay)
                self.answer(json.dumps({"router": router.name}).encode())

        class Quiet(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # HAProxy's health checks hang up without reading the answer

        self.server = Quiet(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return int(self.server.server_address[1])

    def stop(self) -> None:
        assert self.server is not None
        self.server.shutdown()
        self.server.server_close()


def render_config(tmp_path: Path, ports: dict[str, int], front: int, stats: int, sock: Path) -> Path:
    """haproxy.cfg from the role's template, by Ansible, for two routers on loopback (validated like the role does)."""
    hosts = {name: {"ansible_host": "127.0.0.1", "sglang_router": {"port": port}} for name, port in ports.items()}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_router": {"hosts": hosts}}}}))
    out = tmp_path / "haproxy.cfg"
    play = [{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"),
                       str(ROLE.parent / "sglang_defaults/defaults/main.yml")],
        "tasks": [{"ansible.builtin.template": {"src": str(ROLE / "templates/haproxy.cfg.j2"), "dest": str(out),
                                                "mode": "0644", "validate": "haproxy -c -f %s"}}],
    }]  # fmt: skip
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(play))
    given = {"sglang_frontend_port": front, "sglang_frontend_bind_address": "127.0.0.1",
             "sglang_frontend_stats_address": "127.0.0.1", "sglang_frontend_stats_port": stats,
             "sglang_frontend_check_interval_ms": 200,
             "sglang_defaults_frontend": {"socket": str(sock), "backend": "sglang_routers"}}  # fmt: skip
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(playbook),
         "-e", json.dumps(given)],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    return out


def stat_of(sock: Path, backend: str = "sglang_routers") -> dict[str, str]:
    """The status of each server of `backend`."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import command, parse_stat

    stats = parse_stat(command(str(sock), "show stat")).items()
    return {server: s.status for (b, server), s in stats if b == backend}


def answers(sock: Path) -> bool:
    """Whether HAProxy answers on its admin socket yet."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import HAProxyError, command

    try:
        command(str(sock), "show info", 1.0)
    except HAProxyError:
        return False
    return True


def wait_status(sock: Path, want: dict[str, str], timeout: float = 15.0, backend: str = "sglang_routers") -> None:
    deadline = time.monotonic() + timeout
    while (got := stat_of(sock, backend)) != want:
        assert time.monotonic() < deadline, f"HAProxy reports {got}, not {want}"
        time.sleep(0.1)


@dataclass
class Front:
    url: str
    sock: Path
    routers: dict[str, Router]
    config: Path


# Another backend of the same HAProxy, with a server of the same name as one of ours (another service's pool).
OTHER_BACKEND = "\nbackend other_pool\n    server r1 127.0.0.1:{r2} check\n"


@pytest.fixture
def front(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Front]:
    """HAProxy in front of r1 and r2; with a parameter, that configuration text (formatted with the routers' ports)
    is added to the rendered one."""
    routers = {"r1": Router("r1"), "r2": Router("r2")}
    ports = {name: r.start() for name, r in routers.items()}
    port, stats, sock = free_port(), free_port(), tmp_path / "admin.sock"
    config = render_config(tmp_path, ports, port, stats, sock)
    text = config.read_text().replace("    log /dev/log local0 notice\n", "")
    text += getattr(request, "param", "").format(**ports)
    if os.getuid() != 0:
        text = text.replace("    user haproxy\n    group haproxy\n", "")
    config.write_text(text)
    log = tmp_path / "haproxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["haproxy", "-db", "-f", str(config)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while not answers(sock):  # the socket's file exists a moment before HAProxy listens on it
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        wait_status(sock, {"r1": "UP", "r2": "UP"})
        yield Front(f"http://127.0.0.1:{port}", sock, routers, config)
    finally:
        proc.terminate()
        proc.wait(10)
        for r in routers.values():
            if r.server is not None:
                r.server.server_close()


def call(url: str, timeout: float = 20.0) -> tuple[int, str]:
    request = urllib.request.Request(url + "/generate", data=b'{"text": "hi"}', method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())["router"]
    except OSError as e:  # a refused or reset connection, or an HTTP error from HAProxy
        return getattr(e, "code", 0), type(e).__name__


def frontend_server(sock: Path, server: str, state: str, *flags: str) -> dict[str, Any]:
    """The module the router role runs on each front host, run by Ansible on this machine."""
    args = {"socket": str(sock), "backend": "sglang_routers", "server": server, "state": state, "timeout": 30}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "localhost", "-c", "local", "-o", *flags,
         "-m", "sglang.dsv4.sglang_frontend_server", "-a", json.dumps(args)],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return dict(json.loads(done.stdout.split("=>", 1)[1]))


def test_the_rendered_configuration_lists_every_router_checked_on_readiness(front: Front) -> None:
    text = front.config.read_text()
    assert "option httpchk GET /readiness" in text and "option redispatch 1" in text
    assert "retry-on conn-failure empty-response" in text
    with ThreadPoolExecutor(8) as pool:
        answers = Counter(pool.map(lambda _: call(front.url), range(8)))
    assert answers == {(200, "r1"): 4, (200, "r2"): 4}, answers  # leastconn over two idle routers


def poll(what: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not {what} after {timeout:.0f} s"
        time.sleep(0.05)


def test_drain_waits_for_the_open_request_and_sends_the_rest_elsewhere_then_ready_waits_until_up(front: Front) -> None:
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import server_stat

    r1 = front.routers["r1"]
    r1.hold = threading.Event()  # r1 keeps its request open until the test lets it go
    with ThreadPoolExecutor(4) as pool:
        # one on each router (leastconn); the held one waits as long as the drain module takes on a loaded machine
        calls = [pool.submit(call, front.url, 120.0) for _ in range(2)]
        poll("one open session on r1", lambda: server_stat(str(front.sock), "sglang_routers", "r1").sessions == 1)
        drain = pool.submit(frontend_server, front.sock, "r1", "drain")
        poll("r1 drained", lambda: stat_of(front.sock)["r1"] == "DRAIN")
        time.sleep(1.0)
        assert not drain.done(), "the drain returned while r1 still had its request open"
        r1.hold.set()
        drained = drain.result(timeout=60)
        answers = sorted(f.result(timeout=30) for f in calls)
    assert drained["changed"] and drained["before"] == {"status": "UP", "sessions": 1}
    assert drained["after"] == {"status": "DRAIN", "sessions": 0}
    assert answers == [(200, "r1"), (200, "r2")]
    assert {call(front.url) for _ in range(4)} == {(200, "r2")}  # nothing new goes to a drained router
    again = frontend_server(front.sock, "r1", "drain")
    assert not again["changed"]
    ready = frontend_server(front.sock, "r1", "ready")
    assert ready["changed"] and ready["after"]["status"] == "UP"
    assert stat_of(front.sock) == {"r1": "UP", "r2": "UP"}


def test_check_mode_reads_the_front_and_changes_nothing(front: Front) -> None:
    """--check of a drain says it would change r1 and leaves it taking connections; --check of a ready on a drained
    r1 leaves it drained."""
    checked = frontend_server(front.sock, "r1", "drain", "--check")
    assert checked["changed"] and checked["before"] == checked["after"] == {"status": "UP", "sessions": 0}
    assert stat_of(front.sock) == {"r1": "UP", "r2": "UP"}
    frontend_server(front.sock, "r1", "drain")
    checked = frontend_server(front.sock, "r1", "ready", "--check")
    assert checked["changed"] and checked["after"]["status"] == "DRAIN"
    assert stat_of(front.sock) == {"r1": "DRAIN", "r2": "UP"}


def test_a_drain_asked_again_while_the_router_still_drains_waits_for_its_sessions(front: Front) -> None:
    """A drain stopped before its sessions ended (r1 in DRAIN with a request open), then asked again: nothing to
    set, but the call still returns only once r1 has no open session."""
    from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import server_stat, set_state

    r1 = front.routers["r1"]
    r1.hold = threading.Event()
    with ThreadPoolExecutor(4) as pool:
        # the held call waits as long as the module may take to start on a loaded machine (Ansible runs it)
        calls = [pool.submit(call, front.url, 120.0) for _ in range(2)]
        poll("one open session on r1", lambda: server_stat(str(front.sock), "sglang_routers", "r1").sessions == 1)
        set_state(str(front.sock), "sglang_routers", "r1", "drain")
        again = pool.submit(frontend_server, front.sock, "r1", "drain")
        # long enough for Ansible to start the module and read r1's state on a loaded machine (2 s was not: the
        # module then started after the request ended and read no session)
        time.sleep(15.0)
        assert not again.done(), "the second drain returned while r1 still had its request open"
        r1.hold.set()
        drained = again.result(timeout=60)
        assert sorted(f.result(timeout=30) for f in calls) == [(200, "r1"), (200, "r2")]
    assert not drained["changed"] and drained["before"] == {"status": "DRAIN", "sessions": 1}
    assert drained["after"] == {"status": "DRAIN", "sessions": 0}


@pytest.mark.parametrize("front", [OTHER_BACKEND], indirect=True)
def test_a_server_of_the_same_name_in_another_backend_is_left_alone(front: Front) -> None:
    wait_status(front.sock, {"r1": "UP"}, backend="other_pool")
    assert frontend_server(front.sock, "r1", "drain")["changed"]
    assert (stat_of(front.sock), stat_of(front.sock, "other_pool")) == ({"r1": "DRAIN", "r2": "UP"}, {"r1": "UP"})
    assert frontend_server(front.sock, "r1", "ready")["changed"]
    assert stat_of(front.sock) == {"r1": "UP", "r2": "UP"}


def test_a_router_that_died_or_hung_up_costs_the_client_nothing(front: Front) -> None:
    # r2 stops listening; HAProxy has not seen it down yet: a refused connection is tried on r1.
    front.routers["r2"].stop()
    answers = Counter(call(front.url) for _ in range(6))
    assert answers == {(200, "r1"): 6}, answers
    wait_status(front.sock, {"r1": "UP", "r2": "DOWN"})
    # r1 closes a call without an answer (a router killed mid-request): retried, and r1 answers the retry.
    front.routers["r1"].close = True
    assert call(front.url) == (200, "r1")


def test_the_vrrp_configuration_of_two_front_hosts_passes_keepalived_s_own_check(tmp_path: Path) -> None:
    hosts = {
        name: {"sglang_advertise_host": address, "ansible_python_interpreter": sys.executable}
        for name, address in (("front-01", "10.0.0.11"), ("front-02", "10.0.0.12"))
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"sglang_frontend": {"hosts": hosts}}}}))
    play = [{
        "hosts": "sglang_frontend", "connection": "local", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE.parent / "sglang_defaults/defaults/main.yml")],
        "tasks": [{"ansible.builtin.template": {"src": str(ROLE / "templates/keepalived.conf.j2"),
                                                "dest": str(tmp_path / "{{ inventory_hostname }}.conf"),
                                                "mode": "0640", "validate": "keepalived -t -f %s"}}],
    }]  # fmt: skip
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump(play))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), str(playbook),
         "-e", json.dumps({"sglang_frontend_vip": "10.0.0.100/24"})],
        capture_output=True, text=True, check=False, cwd=REPO,
        env={**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    first, second = ((tmp_path / f"front-0{n}.conf").read_text() for n in (1, 2))
    assert "priority 200" in first and "unicast_src_ip 10.0.0.11" in first and "        10.0.0.12\n" in first
    assert "priority 199" in second and "unicast_src_ip 10.0.0.12" in second and "        10.0.0.11\n" in second
    assert "10.0.0.100/24" in first
