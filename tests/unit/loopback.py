"""Servers on 127.0.0.1 for tests of the real HTTP paths: a scripted HTTP server, a socket that accepts and
never answers, and a port where nothing listens. Each lives only inside its `with` block."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# (method, path as sent, headers, body) -> (status, body), or (status, body, headers to add to the answer)
Handler = Callable[[str, str, dict[str, str], bytes], tuple[int, bytes] | tuple[int, bytes, Mapping[str, str]]]


@contextmanager
def http_server(handle: Handler, tls: ssl.SSLContext | None = None) -> Iterator[str]:
    """An HTTP server on a free loopback port answering GET, POST, PUT, PATCH and DELETE with `handle`; yields its
    base URL. An answer is JSON unless the handler's headers name another Content-Type.

    With `tls` (a server-side context holding a certificate) it speaks HTTPS and the URL is https://."""

    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = self.requestline.split()[1]  # as sent: http.server folds a leading "//" in self.path
            status, payload, *added = handle(self.command, path, dict(self.headers.items()), body)
            self.send_response(status)
            for name, value in {"Content-Type": "application/json", **(added[0] if added else {})}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    server.daemon_threads = True
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port whose listener accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]
    finally:
        sock.close()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): a connection there is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
