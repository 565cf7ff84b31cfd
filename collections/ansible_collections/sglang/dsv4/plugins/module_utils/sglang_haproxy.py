"""HAProxy's runtime API over its admin socket (`stats socket ... level admin`): a router's state in the front.

The front (roles/sglang_frontend) lists every router as a server of one backend. A router leaves it with
`set server <backend>/<server> state drain` (no new connection; its open sessions finish; health checks go on) and
comes back with `state ready`. `show stat` is CSV: `scur` counts the server's open sessions, `status` is its check
state (UP, DOWN, DRAIN, MAINT, `UP 1/2` while rising, `NOLB` ...).
"""

from __future__ import annotations

import csv
import socket
import time
from dataclasses import dataclass

STATES = ("ready", "drain", "maint")
# The arguments of the modules that talk to the front (their documentation: doc fragment sglang.dsv4.sglang.front).
FRONT_ARGS = {
    "socket": {"type": "path", "default": "/run/haproxy/admin.sock"},
    "backend": {"type": "str", "required": True},
}


class HAProxyError(RuntimeError):
    """The admin socket refused a command or is not there."""


def command(socket_path: str, text: str, timeout: float = 5.0) -> str:
    """One runtime API command (non-interactive mode: the socket closes after the answer); its answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except OSError as e:
            raise HAProxyError(f"HAProxy's admin socket {socket_path}: {e}") from e
        sock.sendall(text.encode() + b"\n")
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


@dataclass(frozen=True)
class ServerStat:
    backend: str
    server: str
    status: str
    sessions: int  # scur: open sessions through this server now

    @property
    def up(self) -> bool:
        """Passing its checks and taking new connections."""
        return self.status == "UP"


def parse_stat(text: str) -> dict[tuple[str, str], ServerStat]:
    """`show stat` CSV to (backend, server) -> ServerStat; the backend's and frontends' own rows are left out."""
    lines = text.lstrip("# ").splitlines()
    stats = {}
    for row in csv.DictReader(lines):
        name = row.get("svname") or ""
        if name in ("FRONTEND", "BACKEND", ""):
            continue
        stats[(row["pxname"], name)] = ServerStat(row["pxname"], name, row.get("status") or "", int(row["scur"] or 0))
    return stats


def server_stat(socket_path: str, backend: str, server: str) -> ServerStat:
    stats = parse_stat(command(socket_path, "show stat"))
    if (backend, server) not in stats:
        known = ", ".join(f"{b}/{s}" for b, s in sorted(stats)) or "none"
        raise HAProxyError(f"HAProxy has no server {backend}/{server} (it has: {known})")
    return stats[(backend, server)]


# Bits of `show servers state`'s srv_admin_state (HAProxy's enum srv_admin) that `set server ... state` forces.
FORCED_MAINT, FORCED_DRAIN = 0x01, 0x08


def admin_state(socket_path: str, backend: str, server: str) -> str:
    """The state `set server B/S state` last forced on the server: maint, drain or ready, whatever its checks say (a
    drained server whose check fails, a router stopped for its restart, is DOWN in `show stat`, and still drained)."""
    text = command(socket_path, f"show servers state {backend}")
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith("# "):
            names = line[2:].split()
        elif names and len(fields := line.split()) == len(names):
            row = dict(zip(names, fields, strict=True))
            if row["srv_name"] == server:
                forced = int(row["srv_admin_state"])
                return "maint" if forced & FORCED_MAINT else "drain" if forced & FORCED_DRAIN else "ready"
    raise HAProxyError(f"HAProxy's 'show servers state {backend}' has no server {server}: {text.strip()[:200]}")


def set_state(socket_path: str, backend: str, server: str, state: str) -> None:
    """`set server B/S state STATE`; HAProxy answers nothing on success and a reason otherwise."""
    if state not in STATES:
        raise ValueError(f"state {state!r} is not one of {', '.join(STATES)}")
    answer = command(socket_path, f"set server {backend}/{server} state {state}").strip()
    if answer:
        raise HAProxyError(f"HAProxy refused 'set server {backend}/{server} state {state}': {answer}")


def wait_for(socket_path: str, backend: str, server: str, done: str, timeout: float, poll: float = 0.5) -> ServerStat:
    """Poll `show stat` until the server is `idle` (no open session) or `up`; the last stat. Raises on the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        stat = server_stat(socket_path, backend, server)
        if (done == "idle" and stat.sessions == 0) or (done == "up" and stat.up):
            return stat
        if time.monotonic() >= deadline:
            raise HAProxyError(
                f"{backend}/{server} was not {done} after {timeout:.0f} s (status {stat.status}, "
                f"{stat.sessions} open session(s))"
            )
        time.sleep(poll)


def front_rows(routers: list[str], stats: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each declared router's place in one front, from that front's `servers` (sglang_frontend_info): `in` (UP: it
    takes new connections), `out` (down, drained or in maintenance) or `missing` (the front does not list it); and
    `undeclared` for a server the front lists that is no router of the inventory."""
    by_name = {str(s["server"]): s for s in stats}
    rows: list[dict[str, object]] = []
    for router in routers:
        s = by_name.get(router)
        if s is None:
            rows.append({"router": router, "state": "missing", "status": None, "sessions": None})
        else:
            state = "in" if s["status"] == "UP" else "out"
            rows.append({"router": router, "state": state, "status": s["status"], "sessions": s["sessions"]})
    rows += [
        {"router": name, "state": "undeclared", "status": s["status"], "sessions": s["sessions"]}
        for name, s in sorted(by_name.items())
        if name not in routers
    ]
    return rows
