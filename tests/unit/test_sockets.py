"""sglang_sockets against this host's kernel: listeners this test opens are found in /proc with their process."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_sockets import (
    hex_addr,
    holders,
    listeners_of,
    tcp_listeners,
    unit_of,
)

PID = os.getpid()


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("0100007F", "127.0.0.1"),  # /proc/net/tcp: the IPv4 address in host (little-endian) order
        ("00000000", "0.0.0.0"),
        ("0A00A8C0", "192.168.0.10"),
        ("00000000000000000000000001000000", "::1"),  # tcp6: four 32-bit words, each little-endian
        ("00000000000000000000000000000000", "::"),
        ("0000000000000000FFFF00000100007F", "127.0.0.1"),  # an IPv4-mapped address reads as IPv4
        ("000080FE00000000FF005452ED3412FE", "fe80::5254:ff:fe12:34ed"),
    ],
)
def test_hex_addr_reads_the_kernels_notation(text: str, address: str) -> None:
    assert hex_addr(text) == address


def listening(family: socket.AddressFamily, address: str) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen(1)
    return sock


@pytest.fixture
def two_listeners() -> Iterator[tuple[int, int]]:
    """Two listeners of this process on loopback, the second with a connected client (not a listener)."""
    first = listening(socket.AF_INET, "127.0.0.1")
    second = listening(socket.AF_INET, "127.0.0.1")
    client = socket.create_connection(second.getsockname())
    accepted, _ = second.accept()
    try:
        yield first.getsockname()[1], second.getsockname()[1]
    finally:
        for sock in (accepted, client, first, second):
            sock.close()


def test_a_listener_is_found_with_its_process(two_listeners: tuple[int, int]) -> None:
    first, second = two_listeners
    table = tcp_listeners()
    assert [("127.0.0.1", first)] in table.values() and [("127.0.0.1", second)] in table.values()
    mine = [x for x in listeners_of([PID], table) if x["port"] in (first, second)]
    expected = [{"address": "127.0.0.1", "port": p, "pid": PID} for p in sorted((first, second))]
    assert mine == expected  # sorted by port; the accepted and the client sockets are not listeners


def test_holders_names_the_process_its_command_and_unit(two_listeners: tuple[int, int]) -> None:
    _, second = two_listeners
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    assert holders(second) == [{"address": "127.0.0.1", "port": second, "pid": PID, "comm": comm, "unit": unit_of(PID)}]


def test_a_free_port_has_no_holder() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # bound, never listening, now closed: nothing holds it
    assert holders(port) == []


def test_an_ipv6_listener_reads_as_ipv6() -> None:
    try:
        sock = listening(socket.AF_INET6, "::1")
    except OSError as exc:  # a host (or container) without IPv6 loopback: nothing to read in tcp6
        pytest.skip(f"no IPv6 loopback here ({exc})")
    try:
        port = sock.getsockname()[1]
        assert [x for x in listeners_of([PID], tcp_listeners()) if x["port"] == port] == [
            {"address": "::1", "port": port, "pid": PID}
        ]
    finally:
        sock.close()


def test_a_listener_seen_twice_is_listed_once() -> None:
    """Two file descriptors of one socket (dup) give one entry."""
    sock = listening(socket.AF_INET, "127.0.0.1")
    copy = sock.dup()
    try:
        port = sock.getsockname()[1]
        assert [x for x in listeners_of([PID, PID], tcp_listeners()) if x["port"] == port] == [
            {"address": "127.0.0.1", "port": port, "pid": PID}
        ]
    finally:
        copy.close()
        sock.close()


def test_a_process_that_is_gone_is_skipped() -> None:
    gone = 2**22 + 1  # above the kernel's pid_max limit (4,194,304): no such process
    assert listeners_of([gone], tcp_listeners()) == []
    assert unit_of(gone) == ""
