"""The scheduler of one DP rank: a FIFO admission queue, a running batch and a KV token pool.

Model (see README.md):
- a request is admitted, in arrival order, when the running batch has a free slot (`max_running_requests`)
  and the pool can reserve its prompt plus min(max_new_tokens, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION) tokens,
  rounded up to whole pages; the head of the queue blocks the ones behind it;
- a running request holds its prompt plus generated tokens (at least its reservation) until it finishes;
  when the pool cannot grow a request, the newest running request is retracted to the head of the queue and
  later resumes (as SGLang retracts decode requests);
- timing: the first token comes SGLANG_SIM_TTFT_MS (+ prompt / SGLANG_SIM_PREFILL_TOKENS_PER_SEC) after
  admission, then SGLANG_SIM_TOKENS_PER_SEC tokens per second; one loop step advances every running request,
  and steps are at least SGLANG_SIM_STEP_MS apart;
- prefill mode: a request is done after its first token (its KV is then handed to the decode and freed);
- decode mode: after admission the request waits for its prefill (pd.py) before its first token;
- `--max-queued-requests` is enforced only when disaggregation_mode is null, as in SGLang 0.5.23.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .metrics import Stats

QUEUE_FULL = "The request queue is full."
SHUTTING_DOWN = "The server is shutting down; it admits no new requests."


class RequestError(Exception):
    """A request fails with an HTTP status and SGLang's message for it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Phase(enum.Enum):
    WAITING = "waiting"
    TRANSFER = "transfer"  # decode: admitted, waiting for its prefill's KV
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class SimRequest:
    rid: str
    input_ids: list[int]
    max_new_tokens: int  # the limit after SGLang's clipping; sizes the KV reservation
    stream: bool = False
    output_len: int = -1  # tokens the simulated model produces (<= max_new_tokens); -1 = max_new_tokens
    stops_on_eos: bool = False
    bootstrap: tuple[str, int, int] | None = None  # (host, port, room) in decode/prefill mode
    answer: str | None = None  # a recalled needle value, the first generated word (recall.py)
    created: float = field(default_factory=time.monotonic)
    phase: Phase = Phase.WAITING
    held: int = 0  # KV tokens held in the pool
    reserve: int = 0  # KV tokens reserved at admission
    generated: int = 0
    base_generated: int = 0  # tokens generated before the last (re)admission
    resume_at: float = math.inf  # when the next run produces its first token
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    transferred: bool = False
    retractions: int = 0
    error: RequestError | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        if self.output_len < 0:
            self.output_len = self.max_new_tokens

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    @property
    def finished(self) -> bool:
        return self.phase is Phase.FINISHED

    def fail(self, error: RequestError) -> None:
        """End a request that was never queued (refused at admission)."""
        self.error = error
        self.phase = Phase.FINISHED
        self.finished_at = time.monotonic()
        self.changed.set()

    def finish_reason(self) -> dict[str, Any] | None:
        """SGLang's finish_reason: abort with the error, stop at the simulated EOS, else length."""
        if not self.finished:
            return None
        if self.error is not None:
            return {"type": "abort", "message": self.error.message, "status_code": self.error.status, "err_type": None}
        if self.stops_on_eos:
            return {"type": "stop", "matched": 1}
        return {"type": "length", "length": self.generated}


Transfer = Callable[[SimRequest], Awaitable[None]]
Hook = Callable[[SimRequest], None]


class Scheduler:
    def __init__(
        self,
        *,
        dp_rank: int,
        max_total_num_tokens: int,
        max_running_requests: int,
        page_size: int,
        mode: str,
        max_queued_requests: int | None,
        ttft_s: float,
        tokens_per_sec: float,
        prefill_tokens_per_sec: float,
        step_s: float,
        clip_max_new_tokens: int,
        stats: Stats,
        transfer: Transfer | None = None,
        on_prefill_done: Hook | None = None,
    ) -> None:
        self.dp_rank = dp_rank
        self.capacity = max_total_num_tokens
        self.max_running = max_running_requests
        self.page_size = max(1, page_size)
        self.mode = mode
        self.max_queued = max_queued_requests
        self.ttft_s = ttft_s
        self.tps = tokens_per_sec
        self.prefill_tps = prefill_tokens_per_sec
        self.step_s = step_s
        self.clip = clip_max_new_tokens
        self.stats = stats
        self.transfer = transfer
        self.on_prefill_done = on_prefill_done
        self.waiting: collections.deque[SimRequest] = collections.deque()
        self.active: list[SimRequest] = []  # TRANSFER and RUNNING, in admission order
        self.used = 0  # KV tokens held, the ballast included
        self.ballast = 0  # KV tokens a profile holds (profiles.py kv_fill)
        self.stalled = False  # a profile stopped token generation (profiles.py decode_stall)
        self.closed = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._transfers: set[asyncio.Task[None]] = set()
        self._tp_window_start = time.monotonic()
        self._tp_window_tokens = 0
        self.last_gen_throughput = 0.0

    # ---------------------------------------------------------------- public

    @property
    def num_running(self) -> int:
        return sum(1 for r in self.active if r.phase is Phase.RUNNING)

    @property
    def num_transfer(self) -> int:
        return sum(1 for r in self.active if r.phase is Phase.TRANSFER)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.active

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"scheduler-dp{self.dp_rank}")

    async def stop(self) -> None:
        for t in [self._task, *self._transfers]:
            if t is not None:
                t.cancel()
        await asyncio.gather(*[t for t in [self._task, *self._transfers] if t is not None], return_exceptions=True)

    def submit(self, req: SimRequest) -> None:
        """Queue a request; raises RequestError(503) when closed or when the queue cap is hit (mode null only)."""
        if self.closed:
            raise RequestError(503, SHUTTING_DOWN)
        if self.mode == "null" and self.max_queued is not None and len(self.waiting) + 1 > self.max_queued:
            raise RequestError(503, QUEUE_FULL)
        self.waiting.append(req)
        self._wake.set()

    def set_ballast(self, tokens: int) -> None:
        """Hold `tokens` of the pool (whole pages, at most what running requests leave free)."""
        free = self.capacity - (self.used - self.ballast)
        tokens = max(0, min(tokens // self.page_size * self.page_size, free))
        self.used += tokens - self.ballast
        self.ballast = tokens
        self._wake.set()

    def set_stalled(self, stalled: bool) -> None:
        """Stop (or resume) producing tokens; a resumed request continues where it stood."""
        if self.stalled and not stalled:
            now = time.monotonic()
            for req in self.active:
                if req.phase is Phase.RUNNING and req.resume_at < now:
                    req.base_generated = req.generated
                    req.resume_at = now
        self.stalled = stalled
        self._wake.set()

    def abort(self, req: SimRequest, message: str = "The client disconnected.") -> None:
        """Drop a request whose client went away; frees its KV."""
        if req.finished:
            return
        if req.phase is Phase.WAITING:
            try:
                self.waiting.remove(req)
            except ValueError:
                pass
        self._finish(req, time.monotonic(), RequestError(499, message))
        self._wake.set()

    # ---------------------------------------------------------------- loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            now = time.monotonic()
            self._admit(now)
            self._advance(now)
            self._admit(now)  # into the room that finished requests left
            self._update_throughput(now)
            delay = self._next_delay(now)
            self._wake.clear()
            timer = loop.call_later(delay, self._wake.set) if delay is not None else None
            await self._wake.wait()
            if timer is not None:
                timer.cancel()

    def _pages(self, tokens: int) -> int:
        return -(-tokens // self.page_size) * self.page_size

    def _admit(self, now: float) -> None:
        while self.waiting and len(self.active) < self.max_running:
            req = self.waiting[0]
            if self.mode == "prefill":
                reserve = self._pages(req.prompt_len)
            else:
                reserve = self._pages(req.prompt_len + min(req.max_new_tokens, self.clip) + req.base_generated)
            if reserve > self.capacity - self.used:
                return
            self.waiting.popleft()
            self.used += reserve
            req.held = req.reserve = reserve
            req.admitted_at = now
            self.active.append(req)
            if req.retractions == 0:
                self.stats.queue_time.observe(now - req.created)
            needs_kv = self.mode == "decode" and req.bootstrap is not None and not req.transferred
            if needs_kv and self.transfer is not None:
                req.phase = Phase.TRANSFER
                task = asyncio.get_running_loop().create_task(self._do_transfer(req))
                self._transfers.add(task)
                task.add_done_callback(self._transfers.discard)
            else:
                req.phase = Phase.RUNNING
                prefill = (req.prompt_len + req.base_generated) / self.prefill_tps if self.prefill_tps else 0.0
                req.resume_at = now + self.ttft_s + prefill

    async def _do_transfer(self, req: SimRequest) -> None:
        assert self.transfer is not None
        try:
            await self.transfer(req)
        except RequestError as e:
            self._finish(req, time.monotonic(), e)
        else:
            if req.phase is Phase.TRANSFER:
                req.transferred = True
                req.phase = Phase.RUNNING
                req.resume_at = time.monotonic()  # the prefill computed the first token
        self._wake.set()

    def _advance(self, now: float) -> None:
        if self.stalled:
            return
        for req in list(self.active):
            if req.phase is not Phase.RUNNING or now < req.resume_at:
                continue
            limit = min(1, req.output_len) if self.mode == "prefill" else req.output_len
            due = req.base_generated + 1 + int((now - req.resume_at) * self.tps)
            target = min(limit, due)
            if target > req.generated:
                if not self._grow(req, self._pages(req.prompt_len + target)):
                    continue
                if req.generated == 0 and target > 0:
                    req.first_token_at = now
                    self.stats.of(req.stream).ttft.observe(now - req.created)
                self._tp_window_tokens += target - req.generated
                self.stats.of(req.stream).generation_tokens += target - req.generated
                req.generated = target
                req.changed.set()
            if req.generated >= limit:
                if self.mode == "prefill" and self.on_prefill_done is not None:
                    self.on_prefill_done(req)
                self._finish(req, now, None)

    def _grow(self, req: SimRequest, tokens: int) -> bool:
        """Hold `tokens` for req, retracting the newest running requests if the pool is short."""
        need = max(tokens, req.reserve)
        while need - req.held > self.capacity - self.used:
            victims = [r for r in self.active if r.phase is Phase.RUNNING]
            victim = victims[-1]
            self._retract(victim)
            if victim is req:
                return False
        if need > req.held:
            self.used += need - req.held
            req.held = need
        return True

    def _retract(self, req: SimRequest) -> None:
        self.active.remove(req)
        self.used -= req.held
        req.held = req.reserve = 0
        req.base_generated = req.generated
        req.phase = Phase.WAITING
        req.resume_at = math.inf
        req.retractions += 1
        self.stats.retracted += 1
        self.waiting.appendleft(req)

    def _finish(self, req: SimRequest, now: float, error: RequestError | None) -> None:
        if req in self.active:
            self.active.remove(req)
        self.used -= req.held
        req.held = 0
        req.error = error
        req.phase = Phase.FINISHED
        req.finished_at = now
        if error is None:
            per = self.stats.of(req.stream)
            per.requests += 1
            per.prompt_tokens += req.prompt_len
            per.e2e.observe(now - req.created)
            self.stats.prompt_len.observe(req.prompt_len)
        else:
            self.stats.aborted += 1
        req.changed.set()

    def _next_delay(self, now: float) -> float | None:
        if self.stalled:
            return None
        due = math.inf
        for req in self.active:
            if req.phase is not Phase.RUNNING:
                continue
            if now < req.resume_at:
                due = min(due, req.resume_at)
            else:
                steps = req.generated - req.base_generated  # tokens since resume_at
                due = min(due, req.resume_at + steps / self.tps)
        if due == math.inf:
            return None
        return max(due - now, self.step_s)

    def _update_throughput(self, now: float) -> None:
        elapsed = now - self._tp_window_start
        if elapsed >= 1.0:
            self.last_gen_throughput = self._tp_window_tokens / elapsed
            self._tp_window_start = now
            self._tp_window_tokens = 0

    # ---------------------------------------------------------------- views

    def token_usage(self) -> float:
        return self.used / self.capacity if self.capacity else 0.0

    def snapshot(self) -> dict[str, Any]:
        """Load figures in /v1/loads terms."""
        return {
            "num_running_reqs": self.num_running,
            "num_waiting_reqs": self.num_waiting,
            "num_waiting_uncached_tokens": sum(r.prompt_len for r in self.waiting),
            "num_used_tokens": self.used,
            "num_transfer_reqs": self.num_transfer,
        }
