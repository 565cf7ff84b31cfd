"""A stand-in for the router + engines behind it, on 127.0.0.1, for checking the envelope probe without a lab.

Admission as smg: `max_concurrent` requests run, `queue_size` more wait (up to `queue_timeout_s`), the rest get
429 at once. Engine side as SGLang: 400 with the context-length message, a KV pool that requests wait for, and
generation at `per_token_s` per token. Knobs let a test break one behaviour at a time.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Behaviour:
    max_concurrent: int = 4
    queue_size: int = 4
    queue_timeout_s: float = 10.0
    context_len: int = 4096
    max_req_input_len: int = 4090
    pool_tokens: int = 10000
    per_token_s: float = 0.01
    drop_when_pool_full: bool = False  # the defect the total-context probe looks for


class FakeRouter:
    def __init__(self, behaviour: Behaviour) -> None:
        self.b = behaviour
        self.lock = threading.Condition()
        self.running = 0
        self.waiting = 0
        self.used = 0
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeRouter:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def admit(self) -> int:
        """200 when a slot is granted, else the status to answer."""
        b = self.b
        with self.lock:
            if self.running < b.max_concurrent:
                self.running += 1
                return 200
            if self.waiting >= b.queue_size:
                return 429
            self.waiting += 1
            end = time.monotonic() + b.queue_timeout_s
            while self.running >= b.max_concurrent:
                if not self.lock.wait(max(0.0, end - time.monotonic())):
                    self.waiting -= 1
                    return 408
            self.waiting -= 1
            self.running += 1
            return 200

    def release(self) -> None:
        with self.lock:
            self.running -= 1
            self.lock.notify_all()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def reply(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self) -> None:
                b = fake.b
                usage = fake.used / b.pool_tokens
                self.reply(
                    200,
                    {"loads": [{"num_used_tokens": fake.used, "token_usage": usage, "num_waiting_reqs": fake.waiting}]},
                )

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                status = fake.admit()
                if status != 200:
                    self.reply(status, None if status == 429 else {"error": {"message": "queue timeout"}})
                    return
                try:
                    self.generate(body)
                finally:
                    fake.release()

            def generate(self, body: dict[str, Any]) -> None:
                b = fake.b
                n = len(body["input_ids"])
                new = int(body["sampling_params"]["max_new_tokens"])
                if n >= b.context_len:
                    msg = f"The input ({n} tokens) is longer than the model's context length ({b.context_len} tokens)."
                    self.reply(400, {"error": {"message": msg}})
                    return
                if n >= b.max_req_input_len:
                    self.reply(400, {"error": {"message": f"Input length ({n} tokens) exceeds the maximum"}})
                    return
                need = n + new
                with fake.lock:
                    if fake.used + need > b.pool_tokens and b.drop_when_pool_full and body.get("stream"):
                        dropped = True
                    else:
                        dropped = False
                        while fake.used + need > b.pool_tokens:
                            fake.lock.wait(0.05)
                        fake.used += need
                try:
                    self.answer(body, n, new, dropped)
                finally:
                    if not dropped:
                        with fake.lock:
                            fake.used -= need
                            fake.lock.notify_all()

            def answer(self, body: dict[str, Any], n: int, new: int, dropped: bool) -> None:
                meta = {"prompt_tokens": n, "completion_tokens": new, "finish_reason": {"type": "length"}}
                if not body.get("stream"):
                    time.sleep(new * fake.b.per_token_s)
                    self.reply(200, {"text": "x", "meta_info": meta})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                steps = 4
                for i in range(1, steps + 1):
                    time.sleep(new * fake.b.per_token_s / steps)
                    if dropped and i == 2:
                        self.close_connection = True
                        return  # cut off mid-generation
                    done = i == steps
                    chunk = {
                        "text": "x",
                        "meta_info": {
                            **meta,
                            "completion_tokens": new * i // steps,
                            "finish_reason": meta["finish_reason"] if done else None,
                        },
                    }
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
                self.close_connection = True

        return Handler
