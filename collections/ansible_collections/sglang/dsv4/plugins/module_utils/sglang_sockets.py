"""TCP listeners on this host from /proc: which address and port each listening socket holds, and which process.
Read as root (another user's /proc/<pid>/fd is not readable): the verify snapshot and the deploy's preflight."""

from __future__ import annotations

import os
import socket
from typing import Any


def hex_addr(text: str) -> str:
    raw = bytes.fromhex(text)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    mapped = socket.inet_ntop(socket.AF_INET6, words)
    return mapped[7:] if mapped.startswith("::ffff:") and "." in mapped else mapped


def tcp_listeners() -> dict[int, list[tuple[str, int]]]:
    """Socket inode -> listening (address, port) from /proc/net/tcp and tcp6 (state 0A)."""
    out: dict[int, list[tuple[str, int]]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) < 10 or cols[3] != "0A":
                continue
            addr, port = cols[1].rsplit(":", 1)
            out.setdefault(int(cols[9]), []).append((hex_addr(addr), int(port, 16)))
    return out


def listeners_of(pids: list[int], table: dict[int, list[tuple[str, int]]]) -> list[dict[str, Any]]:
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                for addr, port in table.get(int(target[8:-1]), []):
                    found.append({"address": addr, "port": port, "pid": pid})
    unique = {(x["address"], x["port"]): x for x in found}
    return sorted(unique.values(), key=lambda x: (x["port"], x["address"]))


def unit_of(pid: int) -> str:
    """The systemd unit whose cgroup holds `pid` ("" when none or unreadable)."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            path = f.read().splitlines()[-1].rsplit(":", 1)[-1]
    except (OSError, IndexError):
        return ""
    units = [part for part in path.split("/") if part.endswith((".service", ".scope"))]
    return units[-1].rsplit(".", 1)[0] if units else ""


def holders(port: int) -> list[dict[str, Any]]:
    """Every process listening on TCP `port` (any address): address, pid, its command name and unit."""
    table = {inode: [(a, p) for a, p in pairs if p == port] for inode, pairs in tcp_listeners().items()}
    table = {inode: pairs for inode, pairs in table.items() if pairs}
    if not table:
        return []
    pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    out = []
    for found in listeners_of(pids, table):
        try:
            with open(f"/proc/{found['pid']}/comm") as f:
                comm = f.read().strip()
        except OSError:
            comm = "?"
        out.append({**found, "comm": comm, "unit": unit_of(found["pid"])})
    return out
