#!/usr/bin/env python3
"""Envelope probe: sends bounded, exactly sized requests through the router and reports every outcome as JSON.

Runs ON the router host with its python3 (stdlib only, plus the core modules shipped with it): the router may
listen on loopback only.
Usage: python3 envelope_probe.py '<JSON config>'   (built by verify/test_verify_probes.py)

Every request is `POST <router>/generate` with a prompt given as token ids (`input_ids`, which SGLang honours
as they are, so lengths are exact without a tokenizer) and `sampling_params` {max_new_tokens, temperature 0,
ignore_eos true}. The API key, if any, is read from the router's environment file on this host and is never
printed. Before any of them, the probe waits
(at most `idle_wait_s`) until the router's metrics page shows no call running or queued in its admission window.
Probes (each optional):

- context: one request of context_len + 1 tokens (expect 400 and SGLang's message), one of the longest
  accepted length (expect 200).
- calibration: two short requests, to size the others to generate for about `hold_s` seconds.
- parallel: max_concurrent + queue_size requests at once (expect every one 200), then `extra` more while
  they are all admitted or queued (expect 429 within `reject_s`). Fan-out is capped at `max_parallel`.
- total: streamed requests whose tokens together exceed the decode engine's KV pool (expect each one to be
  completed or rejected before it starts, none cut off mid-generation), capped at `max_requests`.
- time: `requests` streamed requests of `input_tokens` + `output_tokens`, one after another: each one's TTFT (to its
  first output chunk) and ITL (first to last output chunk over the tokens between them).

Exit status: 0 when the probe ran (the verdict is for the caller), 1 on a bad config.
"""

from __future__ import annotations

import http.client
import json
import math
import sys
import threading
import time
import urllib.parse
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_engine_live import sample_sum
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_file

ERROR_BODY_CHARS = 600


class Client:
    """HTTP/1.1 client for one base URL; one connection per request (requests run in parallel)."""

    def __init__(self, base_url: str, api_key: str | None) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 80
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def connect(self, timeout: float) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def get_text(self, path: str, timeout: float) -> str | None:
        conn = self.connect(timeout)
        try:
            conn.request("GET", path, headers=self.headers)
            resp = conn.getresponse()
            body = resp.read()
            return body.decode() if resp.status == 200 else None
        except (OSError, ValueError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def get_json(self, path: str, timeout: float) -> Any:
        text = self.get_text(path, timeout)
        try:
            return None if text is None else json.loads(text)
        except ValueError:
            return None


ADMISSION = ("smg_admission_inflight", "smg_admission_queue_depth")  # smg's running and queued calls


def admission_held(metrics: Client) -> float | None:
    """Calls the router holds in its admission window (running and queued), from its metrics page; None when the
    page does not answer."""
    page = metrics.get_text("/metrics", 5.0)
    return None if page is None else sample_sum(page, ADMISSION)


def wait_until_idle(metrics: Client, bound_s: float) -> dict[str, Any]:
    """Waits until the router holds no call, at most `bound_s`: the fill counts on an empty admission window."""
    started = time.monotonic()
    while True:
        held = admission_held(metrics)
        waited = round(time.monotonic() - started, 1)
        if held is None or held == 0 or waited >= bound_s:
            return {"held": held, "waited_s": waited}
        time.sleep(1.0)


def generate_body(
    n_input: int, max_new_tokens: int, token_id: int, stream: bool = False, first: int | None = None
) -> bytes:
    """A /generate body of n_input token ids, all `token_id` but the first (`first`, when given)."""
    ids = [token_id] * n_input
    if first is not None and ids:
        ids[0] = first
    body = {
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": True},
        "stream": stream,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _meta(data: Any) -> dict[str, Any]:
    meta = data.get("meta_info") if isinstance(data, dict) else None
    if not isinstance(meta, dict):
        return {}
    finish = meta.get("finish_reason")
    return {
        "prompt_tokens": meta.get("prompt_tokens"),
        "completion_tokens": meta.get("completion_tokens"),
        "finish": finish.get("type") if isinstance(finish, dict) else finish,
    }


def post(client: Client, body: bytes, timeout: float, sent: threading.Event | None = None) -> dict[str, Any]:
    """One non-streamed /generate: status, seconds, meta_info summary or the start of the error body."""
    start = time.monotonic()
    out: dict[str, Any] = {"status": None}
    conn = client.connect(timeout)
    try:
        conn.request("POST", "/generate", body=body, headers=client.headers)
        if sent is not None:
            sent.set()
        resp = conn.getresponse()
        raw = resp.read()
        out["status"] = resp.status
        if resp.status == 200:
            try:
                out.update(_meta(json.loads(raw)))
            except ValueError:
                out["error"] = "200 with a body that is not JSON"
        else:
            out["body"] = raw.decode("utf-8", "replace")[:ERROR_BODY_CHARS]
    except TimeoutError:
        out["error"] = f"timeout: no answer within {timeout:.0f} s"
        out["timeout"] = True
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        if sent is not None:
            sent.set()
    out["seconds"] = round(time.monotonic() - start, 3)
    return out


def post_stream(client: Client, body: bytes, timeout: float) -> dict[str, Any]:
    """One streamed /generate: whether it completed, was rejected before its first output chunk, or was cut off.

    `chunks` counts the chunks that carry output; an error event (how a router reports an engine's refusal
    inside a stream) is kept apart as `stream_error`. `first_s` / `last_s`: seconds from the request to its first
    and last output chunk, `first_tokens` / `last_tokens`: the completion tokens each reported.
    """
    start = time.monotonic()
    out: dict[str, Any] = {"status": None, "chunks": 0, "done": False}
    conn = client.connect(timeout)
    try:
        conn.request("POST", "/generate", body=body, headers=client.headers)
        resp = conn.getresponse()
        out["status"] = resp.status
        if resp.status != 200:
            out["body"] = resp.read().decode("utf-8", "replace")[:ERROR_BODY_CHARS]
        else:
            while True:
                line = resp.readline()
                if not line:
                    break
                text = line.decode("utf-8", "replace").strip()
                if not text.startswith("data:"):
                    continue
                payload = text[5:].strip()
                if payload == "[DONE]":
                    out["done"] = True
                    break
                try:
                    chunk = json.loads(payload)
                except ValueError:
                    out["error"] = "a stream chunk is not JSON"
                    break
                if isinstance(chunk, dict) and "error" in chunk:
                    out["stream_error"] = str(chunk["error"])[:ERROR_BODY_CHARS]
                    continue
                out["chunks"] += 1  # chunks with generated output
                out.update({k: v for k, v in _meta(chunk).items() if v is not None})
                seen = round(time.monotonic() - start, 6)
                if out["chunks"] == 1:
                    out["first_s"], out["first_tokens"] = seen, out.get("completion_tokens")
                out["last_s"], out["last_tokens"] = seen, out.get("completion_tokens")
    except TimeoutError:
        out["error"] = f"timeout: no data within {timeout:.0f} s"
        out["timeout"] = True
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    out["seconds"] = round(time.monotonic() - start, 3)
    return out


def parallel(jobs: list[Any], worker: Any, join_timeout: float) -> list[dict[str, Any]]:
    """Run worker(job) for every job in its own thread; a thread still running at the end is reported hung."""
    results: list[dict[str, Any] | None] = [None] * len(jobs)

    def run(i: int, job: Any) -> None:
        results[i] = worker(job)

    threads = [threading.Thread(target=run, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    end = time.monotonic() + join_timeout
    for t in threads:
        t.join(max(0.0, end - time.monotonic()))
    return [
        r if r is not None else {"status": None, "error": "hung: still running at the probe deadline", "timeout": True}
        for r in results
    ]


# ---------------------------------------------------------------- probes


def probe_context(client: Client, cfg: dict[str, Any], token_id: int, timeout: float) -> dict[str, Any]:
    context_len, accepted = int(cfg["context_len"]), int(cfg["max_input"])
    over = post(client, generate_body(context_len + 1, 1, token_id), timeout)
    under = post(client, generate_body(accepted, 1, token_id), timeout)
    return {
        "context_len": context_len,
        "over": {"input_tokens": context_len + 1, **over},
        "under": {"input_tokens": accepted, **under},
        "expected_message": (
            f"The input ({context_len + 1} tokens) is longer than the model's context length ({context_len} tokens)."
        ),
    }


def calibrate(client: Client, token_id: int, timeout: float) -> dict[str, Any]:
    """Seconds per generated token and fixed overhead, from a 4-token and a 36-token request."""
    short = post(client, generate_body(8, 4, token_id), timeout)
    long = post(client, generate_body(8, 36, token_id), timeout)
    out: dict[str, Any] = {"short": short, "long": long}
    if short.get("status") != 200 or long.get("status") != 200:
        out["error"] = "calibration requests did not answer 200"
        return out
    per_token = max((long["seconds"] - short["seconds"]) / 32, 1e-4)
    out["per_token_s"] = round(per_token, 6)
    out["overhead_s"] = round(max(short["seconds"] - 4 * per_token, 0.0), 4)
    return out


def tokens_for(seconds: float, cal: dict[str, Any], ceiling: int) -> int:
    wanted = (seconds - float(cal["overhead_s"])) / float(cal["per_token_s"])
    return max(1, min(ceiling, math.ceil(wanted)))


def probe_parallel(
    client: Client, cfg: dict[str, Any], cal: dict[str, Any], token_id: int, deadline: float
) -> dict[str, Any]:
    mcr, queue, extra = int(cfg["max_concurrent"]), int(cfg["queue_size"]), int(cfg["extra"])
    cap = int(cfg["max_parallel"])
    admitted = mcr + queue
    out: dict[str, Any] = {"max_concurrent": mcr, "queue_size": queue, "extra": extra, "max_parallel": cap}
    if admitted + extra > cap:
        out["capped"] = True
        out["reason"] = (
            f"max_concurrent_requests + queue_size + extra = {admitted + extra} exceeds the probe fan-out cap "
            f"{cap} (sglang_verify_probe_max_parallel): only {cap} parallel requests were sent, all of which "
            "the router must admit; the 429 check did not run"
        )
        wave1_n, extra = cap, 0
    else:
        out["capped"] = False
        wave1_n = admitted
    rounds = max(1, math.ceil(wave1_n / max(1, mcr)))
    remaining = deadline - time.monotonic() - 3.0
    # Queued requests must start before queue_timeout_secs; the whole wave must end before the deadline.
    hold = min(float(cfg["hold_s"]), 0.5 * float(cfg["queue_timeout_s"]) / rounds, remaining / (rounds + 1))
    if hold <= 0.2:
        out["error"] = f"not enough time left before the probe deadline for {rounds} rounds of requests"
        return out
    n_tokens = tokens_for(hold, cal, int(cfg.get("max_new_tokens_cap", 4096)))
    body = generate_body(8, n_tokens, token_id)
    client_timeout = min(float(cfg["queue_timeout_s"]) + float(cfg["request_timeout_s"]), remaining)
    out.update(
        {
            "hold_s": round(hold, 3),
            "max_new_tokens": n_tokens,
            "rounds": rounds,
            "client_timeout_s": round(client_timeout, 1),
        }
    )

    sent = [threading.Event() for _ in range(wave1_n)]
    wave1: list[dict[str, Any]] = []
    started = time.monotonic()

    def send_wave1() -> None:
        jobs = list(range(wave1_n))
        wave1.extend(parallel(jobs, lambda i: post(client, body, client_timeout, sent[i]), deadline - started))

    runner = threading.Thread(target=send_wave1, daemon=True)
    runner.start()
    for event in sent:
        event.wait(max(0.0, started + hold - time.monotonic()))
    out["wave1_sent_s"] = round(time.monotonic() - started, 3)
    out["wave1_all_sent"] = all(e.is_set() for e in sent)
    wave2: list[dict[str, Any]] = []
    if extra:
        time.sleep(min(0.3, hold / 4))  # let the router register the last arrivals
        out["wave2_at_s"] = round(time.monotonic() - started, 3)
        reject_timeout = max(2.0, 4 * float(cfg["reject_s"]))
        wave2 = parallel(list(range(extra)), lambda _: post(client, body, reject_timeout), reject_timeout + 2)
    runner.join(max(0.0, deadline - time.monotonic()))
    out["wave1"] = (
        wave1
        if not runner.is_alive()
        else [{"status": None, "error": "hung at the probe deadline", "timeout": True}] * wave1_n
    )
    out["wave2"] = wave2
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def probe_total(
    client: Client, cfg: dict[str, Any], cal: dict[str, Any], token_id: int, deadline: float
) -> dict[str, Any]:
    pool, cap = int(cfg["pool_tokens"]), int(cfg["max_requests"])
    hold = float(cfg["hold_s"])
    n_tokens = tokens_for(hold, cal, int(cfg.get("max_new_tokens_cap", 4096)))
    # SGLang generates at most max_req_len - input - 1 tokens (max_req_len = context_len - 1): keep the
    # input short enough that every request can generate all n_tokens.
    n_input = min(int(cfg["input_tokens"]), int(cfg["context_len"]) - 2 - n_tokens)
    per_request = n_input + n_tokens
    count = pool // per_request + 1
    out: dict[str, Any] = {
        "pool_tokens": pool,
        "input_tokens": n_input,
        "max_new_tokens": n_tokens,
        "requests": count,
        "tokens_sent": count * per_request,
        "max_requests": cap,
    }
    if count > cap:
        out["capped"] = True
        out["reason"] = (
            f"exceeding the KV pool of {pool} tokens needs {count} concurrent requests of {per_request} tokens, "
            f"more than the cap {cap} (sglang_verify_probe_max_total): not sent"
        )
        return out
    out["capped"] = False
    remaining = deadline - time.monotonic() - 1.0
    body = generate_body(n_input, n_tokens, token_id, stream=True)
    observed: dict[str, Any] = {"samples": 0, "max_used_tokens": 0, "max_token_usage": 0.0, "max_waiting": 0}
    stop = threading.Event()
    watch = cfg.get("observe") or {}

    def observe() -> None:
        eng = Client(watch["url"], api_key_file(watch.get("api_key_file")))
        while not stop.is_set():
            data = eng.get_json("/v1/loads", 2.0)
            for load in (data or {}).get("loads", []) if isinstance(data, dict) else []:
                observed["samples"] += 1
                observed["max_used_tokens"] = max(observed["max_used_tokens"], int(load.get("num_used_tokens") or 0))
                observed["max_token_usage"] = max(observed["max_token_usage"], float(load.get("token_usage") or 0))
                observed["max_waiting"] = max(observed["max_waiting"], int(load.get("num_waiting_reqs") or 0))
            stop.wait(0.25)

    watcher = threading.Thread(target=observe, daemon=True) if watch.get("url") else None
    if watcher:
        watcher.start()
    started = time.monotonic()
    out["results"] = parallel(list(range(count)), lambda _: post_stream(client, body, remaining), remaining)
    stop.set()
    if watcher:
        watcher.join(3)
    out["observed"] = observed
    out["seconds"] = round(time.monotonic() - started, 3)
    return out


def probe_time(client: Client, cfg: dict[str, Any], token_id: int, deadline: float) -> dict[str, Any]:
    """Streamed requests one after another: each one's TTFT (`ttft_s`) and ITL (`itl_s`, first to last output chunk
    over the tokens generated between them)."""
    n_input, n_output = int(cfg["input_tokens"]), int(cfg["output_tokens"])
    results: list[dict[str, Any]] = []
    # Prompts of their own (a first token no other probe, of this run or an earlier one, starts with): the engine's
    # prefix cache holds the probes' repeated prompts, and a cached prompt would not show the prefill the model
    # predicts.
    salt = time.time_ns() // 1_000_000 % 100_000
    for index in range(int(cfg["requests"])):
        body = generate_body(n_input, n_output, token_id, stream=True, first=token_id + 1 + (salt + index) % 100_000)
        remaining = deadline - time.monotonic() - 1.0
        if remaining <= 1.0:
            results.append({"status": None, "error": "no time left before the probe deadline", "timeout": True})
            break
        one = post_stream(client, body, min(remaining, float(cfg.get("timeout_s", 60))))
        if one.get("first_s") is not None:
            one["ttft_s"] = one["first_s"]
            between = int(one.get("last_tokens") or 0) - int(one.get("first_tokens") or 0)
            if between > 0:
                one["itl_s"] = (one["last_s"] - one["first_s"]) / between
        results.append(one)
    return {"input_tokens": n_input, "output_tokens": n_output, "results": results}


def main() -> int:
    try:
        cfg = json.loads(sys.argv[1])
        client = Client(cfg["router"], api_key_file(cfg.get("api_key_file")))
    except (IndexError, KeyError, ValueError) as exc:
        print(json.dumps({"error": f"bad config: {exc}"}))
        return 1
    out: dict[str, Any] = {}
    if cfg.get("metrics_url"):
        # The probes count on an idle router (its admission window whole): other calls still in it must end first.
        out["before"] = idle = wait_until_idle(Client(cfg["metrics_url"], None), float(cfg.get("idle_wait_s", 60)))
        if idle["held"]:
            out["error"] = (
                f"the router still held {idle['held']:.0f} calls (running or queued) after {idle['waited_s']} s: "
                "other traffic shares its admission window, which the probes fill; run verify on an idle stack"
            )
            print(json.dumps(out))
            return 0
    begin = time.monotonic()
    deadline = begin + float(cfg.get("deadline_s", 45))
    token_id = int(cfg.get("token_id", 100))
    request_timeout = float(cfg.get("request_timeout_s", 30))
    if cfg.get("context"):
        out["context"] = probe_context(client, cfg["context"], token_id, request_timeout)
    if cfg.get("parallel") or cfg.get("total"):
        cal = calibrate(client, token_id, request_timeout)
        out["calibration"] = cal
        if "error" not in cal:
            if cfg.get("parallel"):
                out["parallel"] = probe_parallel(client, cfg["parallel"], cal, token_id, deadline)
            if cfg.get("total"):
                out["total"] = probe_total(client, cfg["total"], cal, token_id, deadline)
    if cfg.get("time"):
        out["time"] = probe_time(client, cfg["time"], token_id, deadline)
    out["seconds"] = round(time.monotonic() - begin, 3)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
