"""Prefill/decode disaggregation: the prefill's bootstrap server and the decode's handshake with it.

The real engines rendezvous on the prefill's bootstrap port (an HTTP server) and then move KV over RDMA.
Here the bootstrap server also tracks each bootstrap room's prefill, and the decode long-polls
`GET /sim/rooms/<room>` until that prefill has finished, so a decode completes a request only after its
prefill did. A decode whose prefill fails, or cannot be reached, fails the request with HTTP 500 and SGLang's
"Decode handshake failed ..." text after at most SGLANG_SIM_PD_TIMEOUT_S.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

from .scheduler import RequestError, SimRequest

logger = logging.getLogger("sglang_sim")

FAKE_BOOTSTRAP_HOST = "2.2.2.2"  # SGLang's health-check host: no real prefill behind it
DEAD_PREFILL = "Failed to get kvcache from prefill instance, it might be dead"
LONG_POLL_S = 5.0


@dataclass
class Room:
    status: str = "pending"  # pending -> done | failed
    reason: str = ""
    prompt_tokens: int = 0
    updated: float = field(default_factory=time.monotonic)
    event: asyncio.Event = field(default_factory=asyncio.Event)


class RoomRegistry:
    """The prefill side: which bootstrap rooms it has prefilled (kept SGLANG_SIM_ROOM_TTL_S)."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self.rooms: dict[int, Room] = {}
        self._last_expire = time.monotonic()

    def _room(self, room: int) -> Room:
        self._expire()
        if room not in self.rooms:
            self.rooms[room] = Room()
        return self.rooms[room]

    def _expire(self) -> None:
        now = time.monotonic()
        if now - self._last_expire < 1.0:
            return
        self._last_expire = now
        cutoff = now - self.ttl_s
        for key in [k for k, r in self.rooms.items() if r.updated < cutoff]:
            del self.rooms[key]

    def pending(self, room: int) -> None:
        r = self._room(room)
        r.status, r.updated = "pending", time.monotonic()

    def done(self, room: int, prompt_tokens: int) -> None:
        r = self._room(room)
        r.status, r.prompt_tokens, r.updated = "done", prompt_tokens, time.monotonic()
        r.event.set()

    def failed(self, room: int, reason: str) -> None:
        r = self._room(room)
        r.status, r.reason, r.updated = "failed", reason, time.monotonic()
        r.event.set()

    async def wait(self, room: int, timeout: float) -> Room:
        r = self._room(room)
        if r.status == "pending":
            try:
                await asyncio.wait_for(r.event.wait(), timeout)
            except TimeoutError:
                pass
        return r


class BootstrapServer:
    """HTTP server on --disaggregation-bootstrap-port of a prefill engine."""

    def __init__(self, registry: RoomRegistry, host: str, port: int) -> None:
        self.registry = registry
        self.host, self.port = host, port
        self.app = web.Application()
        self.app.router.add_get("/health", self._health)
        self.app.router.add_route("*", "/route", self._route)
        self.app.router.add_get("/sim/rooms/{room}", self._room)
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self.runner.setup()
        await web.TCPSite(self.runner, self.host, self.port).start()
        logger.info(f"Bootstrap server listening on {self.host}:{self.port}")

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")

    async def _route(self, request: web.Request) -> web.Response:
        # The real server registers prefill ranks here; the simulator has none to hand out.
        if request.method not in ("GET", "PUT"):
            return web.Response(text="Method not allowed", status=405, content_type="application/json")
        return web.Response(text="Missing inputs for bootstrap server.", status=400)

    async def _room(self, request: web.Request) -> web.Response:
        try:
            room = int(request.match_info["room"])
            wait = min(float(request.query.get("wait", "0")), LONG_POLL_S)
        except ValueError:
            return web.Response(text="room and wait must be numbers", status=400)
        r = await self.registry.wait(room, max(0.0, wait))
        return web.json_response(
            {"room": room, "status": r.status, "reason": r.reason, "prompt_tokens": r.prompt_tokens}
        )


class PrefillLink:
    """The decode side: waits for the prefill of a request's bootstrap room."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.session: ClientSession | None = None

    async def start(self) -> None:
        self.session = ClientSession(connector=TCPConnector(limit=0), timeout=ClientTimeout(total=None))

    async def stop(self) -> None:
        if self.session is not None:
            await self.session.close()

    def failure(self, req: SimRequest, reason: str) -> RequestError:
        room = req.bootstrap[2] if req.bootstrap else None
        return RequestError(
            500,
            f"Decode handshake failed for request rank=0 decode_req.req.rid={req.rid!r} "
            f"decode_req.req.bootstrap_room={room} with exception KVTransferError(bootstrap_room={room}): {reason}",
        )

    async def wait_for_prefill(self, req: SimRequest) -> None:
        """Return once the prefill finished req's room; raise RequestError(500) on failure or timeout."""
        assert req.bootstrap is not None and self.session is not None
        host, port, room = req.bootstrap
        url = f"http://{host}:{port}/sim/rooms/{room}"
        started = time.monotonic()
        deadline = started + self.timeout_s
        reached = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                elapsed = time.monotonic() - started
                reason = (
                    f"Request {room} timed out after {elapsed:.1f}s in KVPoll.WaitingForInput"
                    if reached
                    else DEAD_PREFILL
                )
                raise self.failure(req, reason)
            try:
                poll = min(remaining, LONG_POLL_S)
                async with self.session.get(
                    url, params={"wait": f"{poll:.3f}"}, timeout=ClientTimeout(total=poll + 2.0)
                ) as resp:
                    if resp.status != 200:
                        raise ClientError(f"bootstrap server answered {resp.status}")
                    data = await resp.json()
                reached = True
                if data.get("status") == "done":
                    return
                if data.get("status") == "failed":
                    raise self.failure(req, str(data.get("reason") or DEAD_PREFILL))
            except (ClientError, TimeoutError, ValueError):
                reached = False
                await asyncio.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
