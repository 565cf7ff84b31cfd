"""HAProxy's runtime API as the front's modules speak it (plugins/module_utils/sglang_haproxy.py): one command per
connection on the admin socket, `show stat` CSV read per server, `set server B/S state` and its refusals, the wait
for a drained router to go idle or a restored one to come UP, and each declared router's place in a front."""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils import sglang_haproxy as hap
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_haproxy import (
    HAProxyError,
    ServerStat,
    command,
    front_rows,
    parse_stat,
    server_stat,
    set_state,
    wait_for,
)
from fakeclock import Clock

# `show stat` as HAProxy 2.6 writes it: a `# ` header, one row per proxy and server, each line ending in a comma
# (the first columns and those up to `bck`).
HEADER = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wretr,wredis,status,weight,"
    "act,bck,\n"
)
SHOW_STAT = HEADER + (
    "sglang,FRONTEND,,,4,9,4096,120,5100,9800,0,0,0,,,,,OPEN,,,,\n"
    "sglang_routers,r1,0,0,3,5,,60,2500,4900,,0,,0,0,0,0,UP,1,1,0,\n"
    "sglang_routers,r2,0,0,1,4,,60,2600,4900,,0,,0,0,0,0,DRAIN,0,1,0,\n"
    "sglang_routers,r3,0,0,0,0,,0,0,0,,0,,0,0,0,0,MAINT,0,1,0,\n"
    "sglang_routers,r4,0,0,0,2,,9,0,0,,0,,0,0,0,0,UP 1/2,1,1,0,\n"
    "sglang_routers,BACKEND,0,0,4,9,410,120,5100,9800,0,0,,0,0,0,0,UP,1,2,0,\n"
    "stats,FRONTEND,,,1,1,4096,7,0,0,0,0,0,,,,,OPEN,,,,\n"
    "stats,BACKEND,0,0,0,0,410,0,0,0,0,0,,0,0,0,0,UP,0,0,0,\n"
    "\n"
)


# --- parse_stat --------------------------------------------------------------------------------------------------


def test_show_stat_gives_every_server_row_and_leaves_out_frontends_and_backends() -> None:
    assert parse_stat(SHOW_STAT) == {
        ("sglang_routers", "r1"): ServerStat("sglang_routers", "r1", "UP", 3),
        ("sglang_routers", "r2"): ServerStat("sglang_routers", "r2", "DRAIN", 1),
        ("sglang_routers", "r3"): ServerStat("sglang_routers", "r3", "MAINT", 0),
        ("sglang_routers", "r4"): ServerStat("sglang_routers", "r4", "UP 1/2", 0),
    }


def test_servers_of_several_backends_are_told_apart_by_backend() -> None:
    text = HEADER + (
        "blue,r1,0,0,2,2,,4,0,0,,0,,0,0,0,0,UP,1,1,0,\n"
        "green,r1,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,1,0,\n"
        "frontend,r9,0,0,7,7,,7,0,0,,0,,0,0,0,0,NOLB,1,1,0,\n"
    )
    stats = parse_stat(text)
    assert stats == {
        ("blue", "r1"): ServerStat("blue", "r1", "UP", 2),
        ("green", "r1"): ServerStat("green", "r1", "DOWN", 0),
        ("frontend", "r9"): ServerStat("frontend", "r9", "NOLB", 7),
    }
    assert [(s.backend, s.server) for s in stats.values()] == [("blue", "r1"), ("green", "r1"), ("frontend", "r9")]


def test_a_row_without_a_server_name_is_left_out() -> None:
    """An empty svname field, and a line cut short before it, name no server."""
    text = HEADER + "sglang_routers,,0,0,5,5,,5,0,0,,0,,0,0,0,0,UP,1,1,0,\nsglang_routers\n"
    assert parse_stat(text) == {}


def test_empty_status_and_session_fields_read_as_no_status_and_no_session() -> None:
    text = HEADER + "sglang_routers,r1,0,0,,0,,0,0,0,,0,,0,0,0,0,,1,1,0,\n"
    assert parse_stat(text) == {("sglang_routers", "r1"): ServerStat("sglang_routers", "r1", "", 0)}


def test_a_line_cut_after_the_session_count_has_no_status() -> None:
    text = HEADER + "sglang_routers,r1,0,0,6\n"
    assert parse_stat(text) == {("sglang_routers", "r1"): ServerStat("sglang_routers", "r1", "", 6)}


def test_a_header_without_the_comment_mark_reads_the_same() -> None:
    text = SHOW_STAT.removeprefix("# ")
    assert parse_stat(text) == parse_stat(SHOW_STAT)
    assert len(parse_stat(text)) == 4


def test_an_answer_that_is_no_csv_gives_no_server() -> None:
    assert parse_stat("") == {}
    assert parse_stat("Unknown command.\n") == {}


@pytest.mark.parametrize(
    ("status", "up"),
    [("UP", True), ("UP 1/2", False), ("DRAIN", False), ("NOLB", False), ("MAINT", False), ("DOWN", False)],
)
def test_only_the_status_up_takes_new_connections(status: str, up: bool) -> None:
    assert ServerStat("b", "s", status, 0).up is up


# --- command, through a stand-in socket ----------------------------------------------------------------------------


class ScriptedSocket:
    """A socket object that records what is done to it and answers `replies` chunk by chunk, then b""."""

    def __init__(self, log: list[Any], replies: list[bytes], refuse: OSError | None = None) -> None:
        self.log, self.replies, self.refuse = log, list(replies), refuse

    def __enter__(self) -> ScriptedSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.log.append(("close",))

    def settimeout(self, value: float | None) -> None:
        self.log.append(("settimeout", value))

    def connect(self, path: str) -> None:
        self.log.append(("connect", path))
        if self.refuse is not None:
            raise self.refuse

    def sendall(self, data: bytes) -> None:
        self.log.append(("sendall", data))

    def recv(self, size: int) -> bytes:
        self.log.append(("recv", size))
        return self.replies.pop(0) if self.replies else b""


def scripted(monkeypatch: pytest.MonkeyPatch, replies: list[bytes], refuse: OSError | None = None) -> list[Any]:
    log: list[Any] = []

    def make(*args: Any) -> ScriptedSocket:
        log.append(("socket", *args))
        return ScriptedSocket(log, replies, refuse)

    fake = SimpleNamespace(AF_UNIX=socket.AF_UNIX, SOCK_STREAM=socket.SOCK_STREAM, socket=make)
    monkeypatch.setattr(hap, "socket", fake)
    return log


def test_command_sends_one_line_and_reads_until_the_socket_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    log = scripted(monkeypatch, [b"# pxname,", b"svname\n", b"x,y\n"])
    assert command("/run/haproxy/admin.sock", "show stat") == "# pxname,svname\nx,y\n"
    assert log == [
        ("socket", socket.AF_UNIX, socket.SOCK_STREAM),
        ("settimeout", 5.0),
        ("connect", "/run/haproxy/admin.sock"),
        ("sendall", b"show stat\n"),
        ("recv", 65536),
        ("recv", 65536),
        ("recv", 65536),
        ("recv", 65536),
        ("close",),
    ]


def test_command_takes_the_given_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    log = scripted(monkeypatch, [])
    assert command("/s", "help", timeout=0.25) == ""
    assert ("settimeout", 0.25) in log


def test_command_replaces_bytes_that_are_no_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, [b"caf\xe9", b" ok\n"])
    assert command("/s", "show info") == "caf\ufffd ok\n"


def test_command_names_the_socket_it_could_not_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    log = scripted(monkeypatch, [b"never read"], refuse=ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(HAProxyError) as err:
        command("/run/haproxy/admin.sock", "show stat")
    assert str(err.value) == "HAProxy's admin socket /run/haproxy/admin.sock: [Errno 111] Connection refused"
    assert isinstance(err.value.__cause__, ConnectionRefusedError)
    assert [entry[0] for entry in log] == ["socket", "settimeout", "connect", "close"]


# --- a stand-in HAProxy on a real UNIX socket ----------------------------------------------------------------------


class FakeHAProxy:
    """HAProxy 2.6's admin socket in non-interactive mode: one command per connection, its answer, then close.
    It knows `show stat` and `set server <backend>/<server> state ready|drain|maint`."""

    STATUS: ClassVar[dict[str, str]] = {"ready": "UP", "drain": "DRAIN", "maint": "MAINT"}

    def __init__(self, path: str, servers: dict[tuple[str, str], list[Any]]) -> None:
        self.path = path
        self.servers = servers  # (backend, server) -> [status, scur]
        self.received: list[bytes] = []
        self.stopping = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            if self.stopping:
                conn.close()
                return
            with conn:
                data = b""
                while not data.endswith(b"\n"):
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.received.append(data)
                conn.sendall(self.answer(data.decode().strip()).encode())

    def answer(self, line: str) -> str:
        if line == "show stat":
            rows = "".join(
                f"{b},{s},0,0,{scur},{scur},,{scur},0,0,,0,,0,0,0,0,{status},1,1,0,\n"
                for (b, s), (status, scur) in self.servers.items()
            )
            return HEADER + rows + "\n"
        words = line.split()
        if len(words) == 5 and words[:2] == ["set", "server"] and words[3] == "state":
            backend, _, server = words[2].partition("/")
            if backend not in {b for b, _ in self.servers}:
                return "No such backend.\n"
            if (backend, server) not in self.servers:
                return "No such server.\n"
            if words[4] not in self.STATUS:
                return "'set server <srv> state' expects 'ready', 'drain' and 'maint'.\n"
            self.servers[(backend, server)][0] = self.STATUS[words[4]]
            return "\n"
        return f"Unknown command: '{line.split(' ')[0]}'\n"

    def close(self) -> None:
        self.stopping = True
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as wake:
            wake.connect(self.path)
        self.listener.close()
        self.thread.join(5)


@pytest.fixture
def front() -> Iterator[FakeHAProxy]:
    with tempfile.TemporaryDirectory(prefix="hap") as d:
        fake = FakeHAProxy(str(Path(d) / "admin.sock"), {("routers", "r1"): ["UP", 2], ("routers", "r2"): ["DOWN", 0]})
        try:
            yield fake
        finally:
            fake.close()


def test_command_over_a_real_socket_returns_the_whole_answer(front: FakeHAProxy) -> None:
    assert command(front.path, "show stat") == (
        HEADER
        + "routers,r1,0,0,2,2,,2,0,0,,0,,0,0,0,0,UP,1,1,0,\nrouters,r2,0,0,0,0,,0,0,0,,0,,0,0,0,0,DOWN,1,1,0,\n\n"
    )
    assert front.received == [b"show stat\n"]


def test_a_missing_socket_is_an_error_naming_it() -> None:
    with tempfile.TemporaryDirectory(prefix="hap") as d:
        path = str(Path(d) / "admin.sock")
        with pytest.raises(HAProxyError) as err:
            command(path, "show stat")
    assert str(err.value) == f"HAProxy's admin socket {path}: [Errno 2] No such file or directory"


def test_server_stat_reads_one_server(front: FakeHAProxy) -> None:
    assert server_stat(front.path, "routers", "r1") == ServerStat("routers", "r1", "UP", 2)
    assert server_stat(front.path, "routers", "r2") == ServerStat("routers", "r2", "DOWN", 0)
    assert front.received == [b"show stat\n", b"show stat\n"]


def test_server_stat_of_an_unknown_server_lists_the_known_ones_sorted(front: FakeHAProxy) -> None:
    front.servers = {("routers", "r2"): ["UP", 0], ("a", "z"): ["UP", 0], ("routers", "r1"): ["UP", 0]}
    with pytest.raises(HAProxyError) as err:
        server_stat(front.path, "routers", "r3")
    assert str(err.value) == "HAProxy has no server routers/r3 (it has: a/z, routers/r1, routers/r2)"


def test_server_stat_without_any_server_says_none(front: FakeHAProxy) -> None:
    front.servers = {}
    with pytest.raises(HAProxyError) as err:
        server_stat(front.path, "routers", "r1")
    assert str(err.value) == "HAProxy has no server routers/r1 (it has: none)"


@pytest.mark.parametrize(("state", "status"), [("drain", "DRAIN"), ("maint", "MAINT"), ("ready", "UP")])
def test_set_state_sends_the_command_and_takes_a_blank_answer_as_done(
    front: FakeHAProxy, state: str, status: str
) -> None:
    front.servers[("routers", "r2")] = ["NOLB", 0]
    set_state(front.path, "routers", "r2", state)
    assert front.received == [f"set server routers/r2 state {state}\n".encode()]
    assert front.servers == {("routers", "r1"): ["UP", 2], ("routers", "r2"): [status, 0]}


@pytest.mark.parametrize(
    ("backend", "server", "reason"),
    [("routers", "r9", "No such server."), ("nope", "r1", "No such backend.")],
)
def test_set_state_raises_haproxy_s_reason(front: FakeHAProxy, backend: str, server: str, reason: str) -> None:
    with pytest.raises(HAProxyError) as err:
        set_state(front.path, backend, server, "drain")
    assert str(err.value) == f"HAProxy refused 'set server {backend}/{server} state drain': {reason}"


def test_set_state_refuses_an_unknown_state_without_asking_haproxy(front: FakeHAProxy) -> None:
    with pytest.raises(ValueError) as err:
        set_state(front.path, "routers", "r1", "up")
    assert str(err.value) == "state 'up' is not one of ready, drain, maint"
    assert front.received == []


# --- wait_for, with a scripted `show stat` and a fake clock ---------------------------------------------------------


def stat_answer(status: str, scur: int) -> str:
    return HEADER + f"routers,r1,0,0,{scur},9,,9,0,0,,0,,0,0,0,0,{status},1,1,0,\n"


def scripted_front(monkeypatch: pytest.MonkeyPatch, answers: list[tuple[str, int]]) -> tuple[Clock, list[Any]]:
    """`show stat` answers r1 as each (status, sessions) in turn, the last one from then on."""
    clock = Clock()
    calls: list[Any] = []

    def fake_command(socket_path: str, text: str, timeout: float = 5.0) -> str:
        calls.append((socket_path, text))
        status, scur = answers[min(len(calls), len(answers)) - 1]
        return stat_answer(status, scur)

    monkeypatch.setattr(hap, "time", clock)
    monkeypatch.setattr(hap, "command", fake_command)
    return clock, calls


def test_wait_for_idle_polls_until_the_last_session_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, calls = scripted_front(monkeypatch, [("DRAIN", 3), ("DRAIN", 1), ("DRAIN", 0)])
    assert wait_for("/a.sock", "routers", "r1", "idle", timeout=30) == ServerStat("routers", "r1", "DRAIN", 0)
    assert calls == [("/a.sock", "show stat")] * 3
    assert clock.sleeps == [0.5, 0.5]


def test_wait_for_up_polls_until_the_checks_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, calls = scripted_front(monkeypatch, [("DOWN", 0), ("UP 1/2", 0), ("UP", 4)])
    assert wait_for("/a.sock", "routers", "r1", "up", timeout=30, poll=2) == ServerStat("routers", "r1", "UP", 4)
    assert len(calls) == 3
    assert clock.sleeps == [2, 2]


@pytest.mark.parametrize(
    ("done", "status", "scur"),
    [("idle", "DOWN", 0), ("idle", "MAINT", 0), ("up", "UP", 7)],
)
def test_wait_for_returns_at_once_when_already_there(
    monkeypatch: pytest.MonkeyPatch, done: str, status: str, scur: int
) -> None:
    clock, calls = scripted_front(monkeypatch, [(status, scur)])
    assert wait_for("/a.sock", "routers", "r1", done, timeout=0) == ServerStat("routers", "r1", status, scur)
    assert len(calls) == 1 and clock.sleeps == []


@pytest.mark.parametrize(
    ("done", "status", "scur", "message"),
    [
        ("idle", "UP", 2, "routers/r1 was not idle after 1 s (status UP, 2 open session(s))"),
        ("idle", "DRAIN", 1, "routers/r1 was not idle after 1 s (status DRAIN, 1 open session(s))"),
        ("up", "DRAIN", 0, "routers/r1 was not up after 1 s (status DRAIN, 0 open session(s))"),
        ("up", "DOWN", 0, "routers/r1 was not up after 1 s (status DOWN, 0 open session(s))"),
        ("up", "UP 1/2", 3, "routers/r1 was not up after 1 s (status UP 1/2, 3 open session(s))"),
        ("gone", "UP", 0, "routers/r1 was not gone after 1 s (status UP, 0 open session(s))"),
    ],
)
def test_wait_for_gives_up_at_the_deadline_with_the_last_stat(
    monkeypatch: pytest.MonkeyPatch, done: str, status: str, scur: int, message: str
) -> None:
    """With a 1 s timeout and a 0.5 s poll: reads at 0, 0.5 and 1.0 s; the read at the deadline is the last."""
    clock, calls = scripted_front(monkeypatch, [(status, scur)])
    with pytest.raises(HAProxyError) as err:
        wait_for("/a.sock", "routers", "r1", done, timeout=1.0)
    assert str(err.value) == message
    assert len(calls) == 3
    assert clock.sleeps == [0.5, 0.5]
    assert clock.now == 1001.0


def test_wait_for_rounds_the_timeout_in_its_message(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, calls = scripted_front(monkeypatch, [("DRAIN", 1)])
    with pytest.raises(HAProxyError) as err:
        wait_for("/a.sock", "routers", "r1", "idle", timeout=3.75, poll=1.25)
    assert str(err.value) == "routers/r1 was not idle after 4 s (status DRAIN, 1 open session(s))"
    assert clock.sleeps == [1.25, 1.25, 1.25] and len(calls) == 4


def test_wait_for_a_server_the_front_does_not_list_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, _ = scripted_front(monkeypatch, [("UP", 0)])
    with pytest.raises(HAProxyError) as err:
        wait_for("/a.sock", "routers", "r2", "up", timeout=60)
    assert str(err.value) == "HAProxy has no server routers/r2 (it has: routers/r1)"
    assert clock.sleeps == []


def test_drain_then_wait_idle_over_a_real_socket(front: FakeHAProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """The router role's sequence against the stand-in: drain r1, its two sessions end, it is idle."""
    clock = Clock()

    def sessions_end(seconds: float) -> None:
        clock.sleep(seconds)
        front.servers[("routers", "r1")][1] -= 1

    monkeypatch.setattr(hap, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=sessions_end))
    set_state(front.path, "routers", "r1", "drain")
    assert wait_for(front.path, "routers", "r1", "idle", timeout=10) == ServerStat("routers", "r1", "DRAIN", 0)
    assert front.received == [b"set server routers/r1 state drain\n"] + [b"show stat\n"] * 3
    assert clock.sleeps == [0.5, 0.5]


# --- front_rows ------------------------------------------------------------------------------------------------------


def test_front_rows_places_each_declared_router_then_the_undeclared_servers_sorted() -> None:
    stats: list[dict[str, object]] = [
        {"server": "zz", "status": "UP", "sessions": 1},
        {"server": "r2", "status": "DRAIN", "sessions": 4},
        {"server": "r1", "status": "UP", "sessions": 2},
        {"server": "old", "status": "DOWN", "sessions": 0},
        {"server": "r4", "status": "UP 1/2", "sessions": 0},
    ]
    assert front_rows(["r1", "r2", "r3", "r4"], stats) == [
        {"router": "r1", "state": "in", "status": "UP", "sessions": 2},
        {"router": "r2", "state": "out", "status": "DRAIN", "sessions": 4},
        {"router": "r3", "state": "missing", "status": None, "sessions": None},
        {"router": "r4", "state": "out", "status": "UP 1/2", "sessions": 0},
        {"router": "old", "state": "undeclared", "status": "DOWN", "sessions": 0},
        {"router": "zz", "state": "undeclared", "status": "UP", "sessions": 1},
    ]


def test_front_rows_of_an_empty_front_and_of_no_router() -> None:
    assert front_rows(["r1"], []) == [{"router": "r1", "state": "missing", "status": None, "sessions": None}]
    assert front_rows([], [{"server": 7, "status": "MAINT", "sessions": 0}]) == [
        {"router": "7", "state": "undeclared", "status": "MAINT", "sessions": 0}
    ]
    assert front_rows([], []) == []
