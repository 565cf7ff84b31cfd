"""The scheduler of one DP rank: a FIFO admission queue, a running batch and a KV token pool.

Model (see README.md):
- a request is admitted, in arrival order, when the running batch has a free slot (`max_running_requests`)
  and the pool can reserve its prompt plus min(max_new_tokens, SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION) tokens,
  rounded up to whole pages; the head of the queue blocks the ones behind it;
- a running request holds its prompt plus generated tokens (at least its reservation) until it finishes;
  when the pool cannot grow a request, the newest running request is retracted to the head of the queue and
  later resumes (as SGLang retracts decode requests);
- timing, fixed pace: the first token comes SGLANG_SIM_TTFT_MS (+ prompt / SGLANG_SIM_PREFILL_TOKENS_PER_SEC) after
  admission, then SGLANG_SIM_TOKENS_PER_SEC tokens per second; one loop step advances every running request,
  and steps are at least SGLANG_SIM_STEP_MS apart;
- timing, time model (a StepClock, SGLANG_SIM_STEP_TABLE): admitted prompts are prefilled first in, first out, one
  pass at a time, up to chunk // isl prompts a pass (a long prompt alone, all its chunks), each pass lasting the
  model's prefill_pass_ms; the pass gives each its first token. A prefix cache of whole pages (as SGLang's radix
  cache; chain hashes of each prefilled prompt's full pages, LRU up to the pool's pages) prices a prompt's leading
  pages already prefilled on this rank as cached (never the last token), reported as its cached_tokens. Running
  requests decode in steps: every one that had its first token before a step starts gets one token at its end, and
  the step lasts the model's decode_step_ms at the batch's size and mean context. Pass and step ends follow a
  virtual schedule: a late loop emits the tokens due with their own times (histograms included) and does not drift;
  wakes are at least SGLANG_SIM_STEP_MS apart while decoding, so a stream event can carry several tokens;
- prefill mode: a request is done after its first token (its KV is then handed to the decode and freed);
- decode mode: after admission the request waits for its prefill (pd.py) before its first token (with a time model,
  plus the KV transfer);
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
from .timing import StepClock

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
    last_token_at: float | None = None  # when the last token came (inter-token latency)
    prefill_at: float = math.inf  # time model: when it joined the prefill queue
    decode_from: float = math.inf  # time model: decode steps starting from then include it
    admitted_at: float | None = None
    first_token_at: float | None = None
    finished_at: float | None = None
    transferred: bool = False
    cached_tokens: int = 0  # time model: prompt tokens the prefix cache held at its prefill
    page_hashes: list[int] | None = None  # time model: chain hashes of the prompt's full pages (computed once)
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
        clock: StepClock | None = None,
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
        # time model (clock): the prefill queue and pass, the decode step, on a virtual schedule
        self.clock = clock
        self._prefill_q: collections.deque[SimRequest] = collections.deque()
        self._pass: list[SimRequest] = []
        self._pass_end = math.inf
        self._last_pass_end = -math.inf
        self._step: list[SimRequest] = []
        self._step_end = math.inf
        self._last_step_end = -math.inf
        self._stalled_at = 0.0
        # time model: the prefix cache, chain hashes of prefilled full pages, least recently used first
        self._prefix_cache: collections.OrderedDict[int, None] = collections.OrderedDict()
        self.prefix_cache_pages = max(1, max_total_num_tokens // self.page_size)

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
        now = time.monotonic()
        if self.stalled and not stalled:
            for req in self.active:
                if req.phase is Phase.RUNNING and req.resume_at < now:
                    req.base_generated = req.generated
                    req.resume_at = now
            if self.clock is not None:
                self._shift(now - self._stalled_at, now)
        elif stalled and not self.stalled:
            self._stalled_at = now
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
            if self.clock is None:
                self._advance(now)
            else:
                self._advance_timed(now)
            self._admit(now)  # into the room that finished requests left
            if self.clock is not None:
                self._advance_timed(now)  # start the pass or step the newly admitted ones can join
            self._update_throughput(now)
            delay = self._next_delay(now) if self.clock is None else self._next_delay_timed(now)
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
                if self.clock is not None:
                    self._enter_timed(req, now)
                    continue
                prefill = (req.prompt_len + req.base_generated) / self.prefill_tps if self.prefill_tps else 0.0
                req.resume_at = now + self.ttft_s + prefill

    async def _do_transfer(self, req: SimRequest) -> None:
        assert self.transfer is not None
        try:
            await self.transfer(req)
        except RequestError as e:
            self._finish(req, time.monotonic(), e)
        else:
            if self.clock is not None:
                await self._kv_arrives(req)
            elif req.phase is Phase.TRANSFER:
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
                elif req.last_token_at is not None:
                    self.stats.itl.observe_many(now - req.last_token_at, target - req.generated)
                req.last_token_at = now
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
        self._forget(req)
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
        self._forget(req)
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

    # ---------------------------------------------------------------- time model (clock)

    def _enter_timed(self, req: SimRequest, now: float) -> None:
        """An admitted request: to the prefill queue, or (decode mode, no KV to wait for) straight to decoding."""
        if self.mode != "decode":
            req.prefill_at = now
            self._prefill_q.append(req)
            return
        if req.generated == 0:  # no prefill behind it (SGLang's fake bootstrap): its first token at once
            if not self._emit(req, now):
                return
            if self._done(req, now):
                return
        req.decode_from = now

    async def _kv_arrives(self, req: SimRequest) -> None:
        """Decode: the prefill finished; the KV transfer takes the model's time, then the first token is out."""
        assert self.clock is not None
        ready = time.monotonic()
        transfer = self.clock.transfer_s(req.prompt_len)
        if transfer > 0:
            await asyncio.sleep(transfer)
        if req.phase is not Phase.TRANSFER:
            return
        req.transferred = True
        req.phase = Phase.RUNNING
        at = ready + transfer
        if self._emit(req, at) and not self._done(req, at):
            req.decode_from = at

    def _forget(self, req: SimRequest) -> None:
        """Drop req from the prefill queue, pass and decode step (finished or retracted)."""
        req.prefill_at = req.decode_from = math.inf
        if self.clock is None:
            return
        for group in (self._prefill_q, self._pass, self._step):
            if req in group:
                group.remove(req)

    def _emit(self, req: SimRequest, at: float) -> bool:
        """One token for req at (virtual) time `at`; False when the pool could not hold it (req was retracted)."""
        if not self._grow(req, self._pages(req.prompt_len + req.generated + 1)):
            return False
        per = self.stats.of(req.stream)
        if req.generated == 0:
            req.first_token_at = at
            per.ttft.observe(at - req.created)
        elif req.last_token_at is not None:
            self.stats.itl.observe(at - req.last_token_at)
        req.last_token_at = at
        req.generated += 1
        per.generation_tokens += 1
        self._tp_window_tokens += 1
        req.changed.set()
        return True

    def _done(self, req: SimRequest, at: float) -> bool:
        """Finish req at `at` if it has all its tokens (prefill mode: the first one)."""
        limit = min(1, req.output_len) if self.mode == "prefill" else req.output_len
        if req.generated < limit:
            return False
        if self.mode == "prefill" and self.on_prefill_done is not None:
            self.on_prefill_done(req)
        self._finish(req, at, None)
        return True

    def _decoding(self) -> list[SimRequest]:
        return [r for r in self.active if r.phase is Phase.RUNNING and r.decode_from < math.inf]

    def _advance_timed(self, now: float) -> None:
        """Run the virtual schedule up to `now`: pass and step ends in time order, each next one from the last."""
        if self.stalled:
            return
        assert self.clock is not None
        while True:
            self._begin_pass()
            if not self._step:
                ready = [r.decode_from for r in self._decoding()]
                start = max(self._last_step_end, min(ready)) if ready else math.inf
                if start <= now and start < self._pass_end:  # a pass ending first may add to the step
                    self._begin_step(start)
            due = min(self._pass_end, self._step_end)
            if due > now:
                return
            if self._pass_end <= self._step_end:
                self._end_pass()
            else:
                self._end_step()

    def _begin_pass(self) -> None:
        assert self.clock is not None
        if self._pass or not self._prefill_q:
            return
        head = self._prefill_q.popleft()
        start = max(self._last_pass_end, head.prefill_at)
        head.cached_tokens = self._cached_prefix(head)
        members, tokens = [head], head.prompt_len + head.base_generated
        uncached = tokens - head.cached_tokens  # the chunk budget counts the tokens computed
        while uncached <= self.clock.chunk and self._prefill_q and self._prefill_q[0].prefill_at <= start:
            nxt = self._prefill_q[0]
            prefix = self._cached_prefix(nxt)
            if uncached + nxt.prompt_len + nxt.base_generated - prefix > self.clock.chunk:
                break
            members.append(self._prefill_q.popleft())
            nxt.cached_tokens = prefix
            tokens += nxt.prompt_len + nxt.base_generated
            uncached += nxt.prompt_len + nxt.base_generated - prefix
        self._pass = members
        n = len(members)
        prefix = sum(r.cached_tokens for r in members) // n
        self._pass_end = start + self.clock.prefill_s(max(1, -(-tokens // n)), n, prefix)

    def _end_pass(self) -> None:
        at, members = self._pass_end, self._pass
        self._pass, self._pass_end, self._last_pass_end = [], math.inf, at
        for req in members:
            if req.phase is not Phase.RUNNING or req not in self.active:
                continue
            self._cache_pages(req)
            limit = min(1, req.output_len) if self.mode == "prefill" else req.output_len
            if req.generated < limit and not self._emit(req, at):
                continue
            if not self._done(req, at):
                req.decode_from = at

    def _page_hashes(self, req: SimRequest) -> list[int]:
        """Chain hashes of req's full prompt pages: page k's is hash((page k-1's, page k's token ids))."""
        if req.page_hashes is None:
            ids, size, prev, out = req.input_ids, self.page_size, 0, []
            for begin in range(0, len(ids) - size + 1, size):
                prev = hash((prev, tuple(ids[begin : begin + size])))
                out.append(prev)
            req.page_hashes = out
        return req.page_hashes

    def _cached_prefix(self, req: SimRequest) -> int:
        """Tokens at the front of req's prompt in the prefix cache: its leading full pages found there, short of the
        whole prompt (at least the last token is computed); the pages found become the most recently used."""
        hashes = self._page_hashes(req)
        limit = min(len(hashes), (req.prompt_len + req.base_generated - 1) // self.page_size)
        found = 0
        while found < limit and hashes[found] in self._prefix_cache:
            found += 1
        for h in reversed(hashes[:found]):
            self._prefix_cache.move_to_end(h)
        return found * self.page_size

    def _cache_pages(self, req: SimRequest) -> None:
        """After req's prefill its full pages enter the prefix cache, the first page the most recently used (the
        least recently used, evicted first past the pool's pages, are the deepest pages, as a radix tree's leaves)."""
        cache = self._prefix_cache
        for h in reversed(self._page_hashes(req)):
            cache[h] = None
            cache.move_to_end(h)
        while len(cache) > self.prefix_cache_pages:
            cache.popitem(last=False)

    def _begin_step(self, start: float) -> None:
        assert self.clock is not None
        members = [r for r in self._decoding() if r.decode_from <= start]
        context = sum(r.prompt_len + r.generated for r in members) / len(members)
        self._step = members
        self._step_end = start + self.clock.decode_s(round(context), len(members))

    def _end_step(self) -> None:
        at, members = self._step_end, self._step
        self._step, self._step_end, self._last_step_end = [], math.inf, at
        for req in members:
            if req.phase is Phase.RUNNING and req in self.active and self._emit(req, at):
                self._done(req, at)

    def _next_delay_timed(self, now: float) -> float | None:
        if self.stalled:
            return None
        # The model's passes and steps pace the loop: a step's tokens go out when it ends, as SGLang streams
        # each step (SGLANG_SIM_STEP_MS, the fixed pace's chunking, does not apply).
        due = min(self._pass_end, self._step_end)
        return None if due == math.inf else max(0.0, due - now)

    def _shift(self, by: float, now: float) -> None:
        """After a stall of `by` seconds: the work in progress ends that much later; what arrived during the stall
        is eligible from `now`."""
        self._pass_end += by
        self._step_end += by
        self._last_pass_end += by
        self._last_step_end += by
        for req in self.active:
            if req.prefill_at < math.inf:
                req.prefill_at = min(req.prefill_at + by, now)
            if req.decode_from < math.inf:
                req.decode_from = min(req.decode_from + by, now)

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
