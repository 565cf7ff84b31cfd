"""The engine: request validation with SGLang's limit texts, dispatch to DP-rank schedulers, lifecycle state."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request import length_error

from . import recall
from .config import EngineConfig
from .metrics import Stats
from .pd import DEAD_PREFILL, FAKE_BOOTSTRAP_HOST, BootstrapServer, PrefillLink, RoomRegistry
from .profiles import Profile
from .scheduler import SHUTTING_DOWN, RequestError, Scheduler, SimRequest
from .tokenizer import Tokenizer

logger = logging.getLogger("sglang_sim")

GENERATE_DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams default of /generate
SCRIPTED_LOAD_PERIOD_S = 0.2


@dataclass(frozen=True)
class Bootstrap:
    host: str | None
    port: int | None
    room: int | None

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Bootstrap:
        port, room = body.get("bootstrap_port"), body.get("bootstrap_room")
        try:
            return cls(
                host=body.get("bootstrap_host"),
                port=None if port is None else int(port),
                room=None if room is None else int(room),
            )
        except (TypeError, ValueError):
            raise RequestError(400, "bootstrap_port and bootstrap_room must be integers") from None


NO_BOOTSTRAP = Bootstrap(None, None, None)


class Engine:
    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.limits = cfg.limits
        self.settings = cfg.settings
        self.stats = Stats()
        self.tokenizer = Tokenizer(int(cfg.model_config.get("vocab_size") or 129280))
        self.status = "Starting"  # Starting -> Up -> ShuttingDown
        self._rr = itertools.count()
        self.registry: RoomRegistry | None = None
        self.bootstrap_server: BootstrapServer | None = None
        self.link: PrefillLink | None = None
        if cfg.mode == "prefill":
            self.registry = RoomRegistry(self.settings.room_ttl_s)
            port = int(cfg.args["disaggregation_bootstrap_port"])
            self.bootstrap_server = BootstrapServer(self.registry, str(cfg.args["host"]), port)
        elif cfg.mode == "decode":
            self.link = PrefillLink(self.settings.pd_timeout_s)
        self.profile = Profile()
        self._scripted: set[SimRequest] = set()
        self._load_task: asyncio.Task[None] | None = None
        s = self.settings
        self.schedulers = [
            Scheduler(
                dp_rank=rank,
                max_total_num_tokens=self.limits.max_total_num_tokens,
                max_running_requests=self.limits.max_running_requests,
                page_size=self.limits.page_size,
                mode=cfg.mode,
                max_queued_requests=cfg.args.get("max_queued_requests"),
                ttft_s=s.ttft_ms / 1000.0,
                tokens_per_sec=s.tokens_per_sec,
                prefill_tokens_per_sec=s.prefill_tokens_per_sec,
                step_s=s.step_ms / 1000.0,
                clip_max_new_tokens=s.clip_max_new_tokens,
                stats=self.stats,
                transfer=self._transfer if self.link else None,
                on_prefill_done=self._prefill_done if self.registry else None,
                clock=cfg.clock,
            )
            for rank in range(cfg.dp_size)
        ]

    # ---------------------------------------------------------------- lifecycle

    @property
    def ready(self) -> bool:
        return self.status == "Up"

    async def start(self) -> None:
        """Open the bootstrap port and start the schedulers; the server turns ready after the startup delay."""
        if self.bootstrap_server is not None:
            await self.bootstrap_server.start()
        if self.link is not None:
            await self.link.start()
        for s in self.schedulers:
            s.start()
        self._load_task = asyncio.get_running_loop().create_task(self._scripted_load(), name="scripted-load")

    def mark_ready(self) -> None:
        self.status = "Up"

    def begin_shutdown(self) -> None:
        self.status = "ShuttingDown"
        for s in self.schedulers:
            s.closed = True

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every admitted request finished; False if the timeout came first."""
        deadline = time.monotonic() + timeout_s
        while any(not s.idle for s in self.schedulers):
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def stop(self) -> None:
        if self._load_task is not None:
            self._load_task.cancel()
            await asyncio.gather(self._load_task, return_exceptions=True)
        for s in self.schedulers:
            await s.stop()
        if self.link is not None:
            await self.link.stop()
        if self.bootstrap_server is not None:
            await self.bootstrap_server.stop()

    # ---------------------------------------------------------------- requests

    def new_rid(self, prefix: str = "") -> str:
        return prefix + uuid.uuid4().hex

    def prepare(
        self,
        input_ids: list[int],
        max_new_tokens: int | None,
        *,
        default_max_new_tokens: int | None,
        stream: bool,
        rid: str,
        bootstrap: Bootstrap,
        words: list[str] | None = None,
    ) -> SimRequest:
        """Validate a request as SGLang 0.5.23 does and build it. Raises RequestError(400) on a limit.

        words: the prompt's words (tokens), when it came as text; the simulated model's recall reads them."""
        lim = self.limits
        context_len = lim.context_len
        auto_truncate = bool(self.cfg.args.get("allow_auto_truncate"))
        ids = list(input_ids)
        # TokenizerManager._validate_one_request, then the scheduler's validate_input_length: the shared checks
        # (ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request) refuse with SGLang's texts; with
        # --allow-auto-truncate SGLang truncates.
        if not auto_truncate:
            error = length_error(context_len, lim.max_req_input_len, len(ids), max_new_tokens)
            if error is not None:
                raise RequestError(error.status, error.text)
        if len(ids) >= context_len:
            logger.warning(
                f"The input ({len(ids)} tokens) is longer than the model's context length "
                f"({context_len} tokens). Truncating the input."
            )
            del ids[context_len:]
        if max_new_tokens is not None and max_new_tokens + len(ids) > context_len:
            max_new_tokens = max(0, context_len - len(ids))
        if len(ids) >= lim.max_req_input_len:
            del ids[lim.max_req_input_len :]
        # Scheduler.init_req_max_new_tokens
        requested = max_new_tokens if max_new_tokens is not None else default_max_new_tokens
        cap = max(0, lim.max_req_len - len(ids) - 1)
        effective = cap if requested is None else max(0, min(requested, cap))
        req = SimRequest(rid=rid, input_ids=ids, max_new_tokens=effective, stream=stream)
        if words:
            req.answer = recall.answer(words[: len(ids)], self.settings.bf16_index_k)
        # Without a client limit the simulated model ends its answer (EOS) after a fixed length.
        if requested is None:
            req.output_len = min(effective, self.settings.default_output_tokens)
            req.stops_on_eos = req.output_len < effective
        else:
            req.output_len = effective
        if bootstrap.room is not None and bootstrap.host not in (None, FAKE_BOOTSTRAP_HOST):
            if self.cfg.mode == "decode" and bootstrap.port is None:
                raise RequestError(400, "bootstrap_port is required with bootstrap_host in decode mode")
            req.bootstrap = (str(bootstrap.host), int(bootstrap.port or 0), bootstrap.room)
        return req

    def submit(self, req: SimRequest) -> Scheduler:
        """Queue a prepared request on a DP rank; raises RequestError(503) when it cannot be queued."""
        if self.status == "ShuttingDown":
            raise RequestError(503, SHUTTING_DOWN)
        if req.bootstrap is not None:
            rank = req.bootstrap[2] % len(self.schedulers)
        else:
            rank = next(self._rr) % len(self.schedulers)
        sched = self.schedulers[rank]
        sched.submit(req)
        if self.registry is not None and req.bootstrap is not None:
            self.registry.pending(req.bootstrap[2])
        return sched

    def reject_room(self, bootstrap: Bootstrap, reason: str) -> None:
        """A prefill that refuses a request tells the decode waiting on the same room."""
        if self.registry is not None and bootstrap.room is not None:
            self.registry.failed(bootstrap.room, reason)

    # ---------------------------------------------------------------- profiles (profiles.py)

    def set_profile(self, profile: Profile) -> None:
        """Switch the scripted load and faults; takes effect at once (the old profile's scripted requests end)."""
        self.profile = profile
        for req in self._scripted:
            for sched in self.schedulers:
                if req in sched.active or req in sched.waiting:
                    sched.abort(req, "The simulator profile changed.")
        self._scripted = set()
        for sched in self.schedulers:
            sched.set_ballast(int(sched.capacity * profile.kv_fill))
            sched.set_stalled(profile.stall)
        logger.info(f"simulator profile: {profile.as_dict()}")

    async def _scripted_load(self) -> None:
        """Keep the profile's scripted requests in flight (checked every SCRIPTED_LOAD_PERIOD_S)."""
        while True:
            self._scripted = {r for r in self._scripted if not r.finished}
            missing = self.profile.load - len(self._scripted) if self.ready else 0
            for _ in range(max(0, missing)):
                self._submit_scripted()
            await asyncio.sleep(SCRIPTED_LOAD_PERIOD_S)

    def _submit_scripted(self) -> None:
        p = self.profile
        room = next(self._rr) + 1_000_000_000
        # Decode requests carry a bootstrap room (as the router sends them) only when the handshake is to fail;
        # otherwise they run as non-disaggregated requests would.
        bootstrap = Bootstrap("127.0.0.1", 1, room) if p.bootstrap_fail and self.cfg.mode == "decode" else NO_BOOTSTRAP
        prompt = min(p.prompt_tokens, max(1, self.limits.max_req_input_len - 1))
        try:
            req = self.prepare(
                [1] * prompt, p.output_tokens, default_max_new_tokens=None, stream=False,
                rid=self.new_rid("scripted-"), bootstrap=bootstrap,
            )  # fmt: skip
            self.submit(req)
        except RequestError as e:
            logger.warning(f"scripted request refused: {e.message}")
            return
        self._scripted.add(req)

    async def _transfer(self, req: SimRequest) -> None:
        assert self.link is not None
        try:
            if self.profile.bootstrap_fail:
                raise self.link.failure(req, DEAD_PREFILL)
            await self.link.wait_for_prefill(req)
        except RequestError as e:
            self.stats.bootstrap_failed += 1
            logger.error(e.message)
            raise

    def _prefill_done(self, req: SimRequest) -> None:
        if self.registry is not None and req.bootstrap is not None:
            self.registry.done(req.bootstrap[2], req.prompt_len)

    def request_ended(self, req: SimRequest) -> None:
        """A prefill request that ended without prefilling (aborted) fails its room."""
        if self.registry is not None and req.bootstrap is not None and req.error is not None:
            self.registry.failed(req.bootstrap[2], req.error.message)
