"""HTTP API with SGLang 0.5.23's routes, bodies, status codes and auth rules (aiohttp)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from typing import Any

from aiohttp import web

from . import info
from .engine import GENERATE_DEFAULT_MAX_NEW_TOKENS, Bootstrap, Engine
from .profiles import ProfileError, parse
from .scheduler import RequestError, Scheduler, SimRequest

logger = logging.getLogger("sglang_sim")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
OPEN_PREFIXES = ("/health", "/ready", "/metrics")
FLUSH_OK = (
    "Cache flushed.\nPlease check backend logs for more details. "
    "(When there are running or waiting requests, the operation will not be performed.)\n"
)
DISCONNECT_CHECK_S = 1.0
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(obj), status=status, content_type="application/json")


def _deprecated(old: str, new: str, handler: Handler) -> Handler:
    """An old path that answers as `new` does, with SGLang's deprecation warning in the log."""

    async def alias(request: web.Request) -> web.StreamResponse:
        logger.warning(
            f"Endpoint '{old}' is deprecated and will be removed in a future version. Please use '{new}' instead."
        )
        return await handler(request)

    return alias


def openai_error(message: str, status: int, err_type: str | None = None) -> dict[str, Any]:
    """SGLang's ErrorResponse: `BadRequestError` for a 400 from the engine, else the status code as type."""
    kind = err_type or ("BadRequestError" if status == 400 else str(status))
    return {"object": "error", "message": message, "type": kind, "param": None, "code": status}


def generate_error(err: RequestError) -> web.Response:
    """/generate: a 400 is `{"error":{"message"}}`; other codes go through SGLang's HTTPException handler."""
    if err.status == 400:
        return _json({"error": {"message": err.message}}, 400)
    return _json(openai_error(err.message, err.status), err.status)


def _status_name(status: int) -> str:
    try:
        return HTTPStatus(status).name
    except ValueError:
        return str(status)


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as e:
        raise RequestError(400, f"Invalid JSON body: {e}") from None
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    return body


def _int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name} must be an integer")
    if value < 0:
        raise RequestError(400, f"{name} must be non-negative, got {value}.")
    return value


class Api:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.cfg = engine.cfg
        self.api_key: str | None = self.cfg.args.get("api_key")

    # ---------------------------------------------------------------- app

    def build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth], client_max_size=512 * 1024 * 1024)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/health_generate", self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/server_info", self.server_info)
        r.add_get("/get_server_info", _deprecated("/get_server_info", "/server_info", self.server_info))
        r.add_get("/model_info", self.model_info)
        r.add_get("/get_model_info", _deprecated("/get_model_info", "/model_info", self.model_info))
        r.add_get("/v1/models", self.models)
        r.add_get("/v1/models/{model:.+}", self.model)
        r.add_get("/v1/loads", self.loads)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        r.add_post("/generate", self.generate)
        r.add_put("/generate", self.generate)
        r.add_post("/v1/completions", self.completions)
        r.add_post("/v1/chat/completions", self.chat_completions)
        if self.cfg.args.get("enable_metrics"):
            r.add_get("/metrics", self.metrics)
        r.add_get("/sim/profile", self.get_profile)
        r.add_post("/sim/profile", self.set_profile)
        return app

    @web.middleware
    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.api_key and request.method != "OPTIONS" and not request.path.startswith(OPEN_PREFIXES):
            header = request.headers.get("Authorization", "")
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not secrets.compare_digest(token, self.api_key):
                return _json({"error": "Unauthorized"}, 401)
        return await handler(request)

    # ---------------------------------------------------------------- state and info

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.engine.ready else 503)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.engine.ready else 503)

    async def server_info(self, request: web.Request) -> web.Response:
        return _json(info.server_info(self.engine))

    async def model_info(self, request: web.Request) -> web.Response:
        return _json(info.model_info(self.engine))

    async def models(self, request: web.Request) -> web.Response:
        return _json(info.model_list(self.engine))

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.cfg.served_model_name:
            return _json(
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                404,
            )
        return _json(info.model_card(self.engine, name))

    async def loads(self, request: web.Request) -> web.Response:
        q = request.query
        try:
            dp_rank = int(q["dp_rank"]) if "dp_rank" in q else None
        except ValueError:
            return _json({"detail": "dp_rank must be an integer"}, 400)
        include = {s.strip() for s in q["include"].split(",")} if q.get("include") else None
        try:
            body = info.loads(self.engine, dp_rank, include)
        except ValueError as e:
            return _json({"object": "error", "message": str(e), "type": "400", "param": None, "code": 400}, 400)
        if q.get("format") == "prometheus":
            return web.Response(
                text=info.loads_prometheus(body),
                content_type="text/plain",
                headers={"X-Content-Format": "prometheus; version=0.0.4"},
            )
        return _json(body)

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=info.metrics_text(self.engine), content_type="text/plain", charset="utf-8")

    async def get_profile(self, request: web.Request) -> web.Response:
        """The simulator's scripted load/fault profile (not an SGLang route; behind the API key)."""
        return _json(self.engine.profile.as_dict())

    async def set_profile(self, request: web.Request) -> web.Response:
        """Switch the profile: {"profile": name, <parameter>: value, ...} (profiles.py)."""
        try:
            profile = parse(await _read_json(request))
        except ProfileError as e:
            return _json({"error": str(e)}, 400)
        except RequestError as e:
            return _json({"error": e.message}, e.status)
        self.engine.set_profile(profile)
        return _json(profile.as_dict())

    async def flush_cache(self, request: web.Request) -> web.Response:
        try:
            timeout = float(request.query.get("timeout", "0"))
        except ValueError:
            timeout = -1.0
        if timeout < 0:
            return _json(openai_error("timeout must be a number >= 0", 400, "Bad Request"), 400)
        if all(s.idle for s in self.engine.schedulers):
            logger.info("Cache flushed successfully!")
            return web.Response(text=FLUSH_OK)
        return web.Response(text="Flush cache failed.\n", status=400)

    # ---------------------------------------------------------------- generation

    def _admit(self, req: SimRequest, bootstrap: Bootstrap) -> Scheduler | None:
        """Queue req. When it is refused (queue full, shutting down) req ends with that error and None returns."""
        try:
            return self.engine.submit(req)
        except RequestError as e:
            self.engine.reject_room(bootstrap, e.message)
            self.engine.stats.aborted += 1
            req.fail(e)
            return None

    async def _updates(self, request: web.Request, req: SimRequest, sched: Scheduler | None) -> AsyncIterator[None]:
        """Yields after each scheduler update of req, until it finishes. While no update comes, the client is checked
        every DISCONNECT_CHECK_S and req aborted once it went away, streamed or not: SGLang's tokenizer manager waits
        for the next output with a timeout and aborts the request when `request.is_disconnected()`, so a call
        abandoned while it waits for its first token stops holding the engine."""
        while True:
            try:
                await asyncio.wait_for(req.changed.wait(), DISCONNECT_CHECK_S)
            except TimeoutError:
                if sched is not None and (request.transport is None or request.transport.is_closing()):
                    logger.info(f"[http_server] Client disconnected: rid={req.rid}")
                    sched.abort(req)
                if not req.finished:
                    continue
            req.changed.clear()
            yield
            if req.finished:
                return

    async def _wait(self, request: web.Request, req: SimRequest, sched: Scheduler | None) -> None:
        """Wait for a non-streaming request (aborted if the client goes away, as _updates checks)."""
        try:
            async for _ in self._updates(request, req, sched):
                pass
        finally:
            self._release(req, sched)

    @contextlib.asynccontextmanager
    async def _streaming(
        self, resp: web.StreamResponse, req: SimRequest, sched: Scheduler | None
    ) -> AsyncIterator[None]:
        """A streamed answer's end: `data: [DONE]`, a client gone away logged as SGLang logs it, the request
        released."""
        try:
            yield
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            logger.info(f"[http_server] Client disconnected: rid={req.rid}")
        finally:
            self._release(req, sched)

    def _release(self, req: SimRequest, sched: Scheduler | None) -> None:
        if sched is not None:
            sched.abort(req)  # no-op once finished
        self.engine.request_ended(req)

    def _meta(self, req: SimRequest) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finish_reason(),
            "prompt_tokens": req.prompt_len,
            "weight_version": self.cfg.args.get("weight_version", "default"),
            "num_retractions": req.retractions,
            "reasoning_tokens": 0,
            "completion_tokens": req.generated,
            "cached_tokens": req.cached_tokens,
        }
        if req.finished and req.finished_at is not None:
            meta["e2e_latency"] = round(req.finished_at - req.created, 6)
        return meta

    def _usage(self, req: SimRequest) -> dict[str, Any]:
        details = {"cached_tokens": req.cached_tokens} if self.cfg.args.get("enable_cache_report") else None
        return {
            "prompt_tokens": req.prompt_len,
            "total_tokens": req.prompt_len + req.generated,
            "completion_tokens": req.generated,
            "prompt_tokens_details": details,
            "reasoning_tokens": 0,
        }

    def _text(self, req: SimRequest, start: int, end: int) -> str:
        return self.engine.tokenizer.output_text(req.prompt_len, start, end, req.answer)

    def _prepare_generate(self, body: dict[str, Any], bootstrap: Bootstrap, stream: bool) -> SimRequest:
        params = body.get("sampling_params") or {}
        if not isinstance(params, dict):
            raise RequestError(400, "sampling_params must be an object")
        words: list[str] | None = None
        if body.get("input_ids") is not None:
            ids = body["input_ids"]
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise RequestError(400, "The simulator serves one prompt per request: input_ids must be a list of ints")
        elif body.get("text") is not None:
            if not isinstance(body["text"], str):
                raise RequestError(400, "The simulator serves one prompt per request: text must be a string")
            ids = self.engine.tokenizer.encode(body["text"])
            words = body["text"].split()
        else:
            raise RequestError(400, "Either text, input_ids or input_embeds should be provided.")
        return self.engine.prepare(
            ids,
            _int_or_none(params.get("max_new_tokens"), "max_new_tokens"),
            default_max_new_tokens=GENERATE_DEFAULT_MAX_NEW_TOKENS,
            stream=stream,
            rid=str(body.get("rid") or self.engine.new_rid()),
            bootstrap=bootstrap,
            words=words,
        )

    async def generate(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await _read_json(request)
            bootstrap = Bootstrap.from_body(body)
        except RequestError as e:
            return generate_error(e)
        stream = bool(body.get("stream"))
        try:
            req = self._prepare_generate(body, bootstrap, stream)
        except RequestError as e:
            # The tokenizer's checks raise ValueError: a 400 body, or an error event in a stream.
            self.engine.reject_room(bootstrap, e.message)
            return await self._sse_error(request, e) if stream else generate_error(e)
        sched = self._admit(req, bootstrap)
        if stream:
            return await self._generate_stream(request, req, sched)
        await self._wait(request, req, sched)
        if req.error is not None and req.error.status != 499:
            return generate_error(req.error)
        return _json(self._generate_body(req))

    def _generate_body(self, req: SimRequest) -> dict[str, Any]:
        ids = self.engine.tokenizer.output_ids(req.prompt_len, 0, req.generated, req.answer)
        return {"text": self._text(req, 0, req.generated), "output_ids": ids, "meta_info": self._meta(req)}

    async def _sse_error(self, request: web.Request, err: RequestError) -> web.StreamResponse:
        resp = web.StreamResponse(headers=SSE_HEADERS)
        await resp.prepare(request)
        error = {
            "error": {"message": err.message, "type": "invalid_request_error", "code": err.status, "retryable": False}
        }
        await resp.write(f"data: {_dumps(error)}\n\ndata: [DONE]\n\n".encode())
        await resp.write_eof()
        return resp

    async def _generate_stream(
        self, request: web.Request, req: SimRequest, sched: Scheduler | None
    ) -> web.StreamResponse:
        """Cumulative chunks (SGLang's default, non-incremental); an abort is the last chunk's finish_reason."""
        resp = web.StreamResponse(headers=SSE_HEADERS)
        sent = -1
        async with self._streaming(resp, req, sched):
            await resp.prepare(request)
            async for _ in self._updates(request, req, sched):
                if req.generated == sent and not req.finished:
                    continue
                sent = req.generated
                await resp.write(f"data: {_dumps(self._generate_body(req))}\n\n".encode())
        return resp

    # ---------------------------------------------------------------- OpenAI-compatible

    def _openai_max_tokens(self, body: dict[str, Any], chat: bool) -> int | None:
        value = body.get("max_completion_tokens") if chat else None
        if value is None:
            value = body.get("max_tokens")
        max_tokens = _int_or_none(value, "max_tokens")
        limit = self.cfg.args.get("context_length")
        if chat and max_tokens and limit and max_tokens > limit and not self.cfg.args.get("allow_auto_truncate"):
            raise RequestError(
                400,
                f"max_completion_tokens is too large: {max_tokens}.This model supports at most {limit} "
                "completion tokens.",
            )
        return max_tokens

    def _prompt(self, body: dict[str, Any], chat: bool) -> tuple[list[int], list[str] | None]:
        """The prompt's token ids, and its words when it came as text."""
        tok = self.engine.tokenizer
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise RequestError(400, "messages must be a non-empty list")
            try:
                words = tok.chat_words(messages)
            except ValueError as e:
                raise RequestError(400, str(e)) from None
            return tok.encode(" ".join(words)), words
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]
        if isinstance(prompt, str):
            return tok.encode(prompt), prompt.split()
        if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
            return prompt, None
        raise RequestError(400, "The simulator serves one prompt per request: prompt must be a string or token ids")

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=False)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._openai(request, chat=True)

    async def _openai(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if request.content_type != "application/json":
            return _json(
                openai_error("Unsupported Media Type: Only 'application/json' is allowed", 400, "Bad Request"), 400
            )
        bootstrap = Bootstrap(None, None, None)
        try:
            body = await _read_json(request)
            bootstrap = Bootstrap.from_body(body)
            stream = bool(body.get("stream"))
            ids, words = self._prompt(body, chat)
            req = self.engine.prepare(
                ids,
                self._openai_max_tokens(body, chat),
                default_max_new_tokens=None,
                stream=stream,
                rid=str(body.get("rid") or self.engine.new_rid("chatcmpl-" if chat else "cmpl-")),
                bootstrap=bootstrap,
                words=words,
            )
        except RequestError as e:
            self.engine.reject_room(bootstrap, e.message)
            return _json(openai_error(e.message, e.status), e.status)
        sched = self._admit(req, bootstrap)
        model = str(body.get("model") or self.cfg.served_model_name)
        if stream:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._openai_stream(request, req, sched, model, chat, include_usage)
        await self._wait(request, req, sched)
        if req.error is not None and req.error.status != 499:
            return _json(openai_error(req.error.message, req.error.status), req.error.status)
        return _json(self._openai_body(req, model, chat))

    def _finish(self, req: SimRequest) -> tuple[str | None, Any]:
        reason = req.finish_reason()
        if reason is None:
            return None, None
        if reason["type"] == "stop":
            return "stop", reason.get("matched")
        if reason["type"] == "abort":
            return "abort", None
        return "length", None

    def _openai_answer(
        self, req: SimRequest, model: str, kind: str, content: dict[str, Any], usage: dict[str, Any] | None
    ) -> dict[str, Any]:
        """One OpenAI answer or stream chunk of `kind` with one choice holding `content`."""
        finish, matched = self._finish(req)
        choice = {"index": 0, **content, "logprobs": None, "finish_reason": finish, "matched_stop": matched}
        return {"id": req.rid, "object": kind, "created": int(time.time()), "model": model, "choices": [choice],
                "usage": usage}  # fmt: skip

    def _openai_body(self, req: SimRequest, model: str, chat: bool) -> dict[str, Any]:
        text = self._text(req, 0, req.generated)
        message = {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
        content = {"message": message} if chat else {"text": text}
        kind = "chat.completion" if chat else "text_completion"
        body = self._openai_answer(req, model, kind, content, self._usage(req))
        return body | {"metadata": {"weight_version": self.cfg.args.get("weight_version", "default")}}

    def _chunk(self, req: SimRequest, model: str, chat: bool, delta: str, first: bool) -> dict[str, Any]:
        content: dict[str, Any]
        if chat:
            content = {"delta": {"role": "assistant", "content": delta} if first else {"content": delta}}
        else:
            content = {"text": delta}
        return self._openai_answer(req, model, "chat.completion.chunk" if chat else "text_completion", content, None)

    async def _openai_stream(
        self,
        request: web.Request,
        req: SimRequest,
        sched: Scheduler | None,
        model: str,
        chat: bool,
        include_usage: bool,
    ) -> web.StreamResponse:
        """Deltas as SSE events. An abort (queue full, failed handshake) is an error event in a 200 stream."""
        resp = web.StreamResponse(headers=SSE_HEADERS)
        sent, first = 0, True
        async with self._streaming(resp, req, sched):
            # SGLang waits for the first output before it answers, so headers go out with the first event.
            async for _ in self._updates(request, req, sched):
                if req.generated == sent and not req.finished:
                    continue
                if not resp.prepared:
                    await resp.prepare(request)
                if req.error is not None:
                    error = {"error": openai_error(req.error.message, req.error.status, _status_name(req.error.status))}
                    await resp.write(f"data: {_dumps(error)}\n\n".encode())
                    break
                chunk = self._chunk(req, model, chat, self._text(req, sent, req.generated), first)
                await resp.write(f"data: {_dumps(chunk)}\n\n".encode())
                sent, first = req.generated, False
            if not resp.prepared:
                await resp.prepare(request)
            if include_usage and req.error is None:
                usage = {**self._chunk(req, model, chat, "", False), "choices": [], "usage": self._usage(req)}
                await resp.write(f"data: {_dumps(usage)}\n\n".encode())
        return resp
