"""HTTP endpoints against a running simulator: key sets, status codes and texts of SGLang 0.5.23 (reference 1, 3, 4)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from simtools import Launcher, Sim

KEY = "s3cret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
# context 8192, KV pool capped at 4096 tokens: max_req_len = 4095, max_req_input_len = 4090.
FLAGS = [
    "--served-model-name",
    "dsv4",
    "--api-key",
    KEY,
    "--enable-metrics",
    "--context-length",
    "8192",
    "--max-total-tokens",
    "4096",
    "--max-running-requests",
    "16",
    "--enable-cache-report",
]
ENV = {"SGLANG_SIM_TTFT_MS": "5", "SGLANG_SIM_TOKENS_PER_SEC": "1000", "SGLANG_SIM_STEP_MS": "5"}

MODEL_INFO_KEYS = {
    "model_path",
    "served_model_name",
    "tokenizer_path",
    "is_generation",
    "preferred_sampling_params",
    "weight_version",
    "load_format",
    "reasoning_parser",
    "tool_call_parser",
    "disaggregation_mode",
    "has_image_understanding",
    "has_audio_understanding",
    "model_type",
    "architectures",
}
MEMORY_USAGE_KEYS = {"weight", "kvcache", "startup_available", "token_capacity", "token_capacity_swa", "graph"}
GRAPH_KEYS = {"prefill", "decode", "target_verify", "draft_prefill", "draft_decode", "draft_extend"}
LOAD_CORE_KEYS = {
    "timestamp",
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_waiting_uncached_tokens",
    "num_used_tokens",
    "num_total_tokens",
    "num_active_tokens",
    "num_prealloc_ready_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
    "total_prefill_uncached_tokens",
    "total_prefill_busy_us",
    "decode_moments",
}
TOO_LONG = "The input ({n} tokens) is longer than the model's context length (8192 tokens)."
TOO_MANY = (
    "Requested token count exceeds the model's maximum context length of 8192 tokens. You requested a total of "
    "{t} tokens: {i} tokens from the input messages and {m} tokens for the completion. Please reduce the number of "
    "tokens in the input messages or the completion to fit within the limit."
)
OVER_POOL = (
    "Input length ({n} tokens) exceeds the maximum allowed length (4090 tokens). "
    "Use a shorter input or enable --allow-auto-truncate."
)


@pytest.fixture(scope="module")
def sim(launcher: Launcher) -> Sim:
    return launcher.sim(FLAGS, ENV)


@pytest.fixture(scope="module")
def client(sim: Sim) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.url, headers=AUTH, timeout=20) as c:
        yield c


def words(n: int) -> str:
    return " ".join(["w"] * n)


def sse(text: str) -> list[str]:
    return [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]


# ---------------------------------------------------------------- auth, health


def test_auth_open_and_closed_paths(sim: Sim) -> None:
    for path in ("/health", "/health_generate", "/ready", "/metrics"):
        assert httpx.get(sim.url + path, timeout=5).status_code == 200, path
    for path in ("/server_info", "/v1/models", "/model_info", "/v1/loads", "/flush_cache"):
        r = httpx.get(sim.url + path, timeout=5)
        assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"}), path
    r = httpx.post(sim.url + "/generate", json={"text": "a"}, headers={"Authorization": "Bearer wrong"}, timeout=5)
    assert (r.status_code, r.json()) == (401, {"error": "Unauthorized"})
    r = httpx.get(sim.url + "/health", timeout=5)
    assert r.content == b""


# ---------------------------------------------------------------- info endpoints


def test_server_info(client: httpx.Client, sim: Sim) -> None:
    info = client.get("/server_info").json()
    for key in (
        "model_path",
        "served_model_name",
        "tokenizer_path",
        "host",
        "port",
        "tp_size",
        "dp_size",
        "attn_dp_size",
        "pp_size",
        "base_gpu_id",
        "gpu_id_step",
        "context_length",
        "max_total_tokens",
        "max_running_requests",
        "max_queued_requests",
        "chunked_prefill_size",
        "max_prefill_tokens",
        "mem_fraction_static",
        "page_size",
        "kv_cache_dtype",
        "attention_backend",
        "swa_full_tokens_ratio",
        "disaggregation_mode",
        "disaggregation_transfer_backend",
        "disaggregation_bootstrap_port",
        "disaggregation_ib_device",
        "disable_radix_cache",
        "enable_metrics",
        "enable_cache_report",
        "watchdog_timeout",
        "api_key",
        "log_level",
        "trust_remote_code",
        "enable_dp_attention",
        "cuda_graph_max_bs_decode",
        "cuda_graph_bs_decode",
        "allow_auto_truncate",
        "launch_command",
        "status",
        "max_total_num_tokens",
        "max_req_input_len",
        "startup_time",
        "kv_events",
        "internal_states",
        "version",
        "frontend",
    ):
        assert key in info, key
    assert len(info) > 546
    assert info["version"] == "0.5.23" and info["frontend"] == "python" and info["status"] == "ready"
    assert info["api_key"] == KEY  # plaintext, as the real server
    assert info["served_model_name"] == "dsv4" and info["context_length"] == 8192
    assert info["page_size"] == 256 and info["kv_cache_dtype"] == "fp8_e4m3" and info["attention_backend"] == "dsv4"
    assert info["max_total_tokens"] == 4096 and info["max_total_num_tokens"] == 4096
    assert info["max_req_input_len"] == 4090 and info["kv_events"] is None
    assert info["launch_command"].startswith("--model-path ") and "--api-key" in info["launch_command"]
    (state,) = info["internal_states"]
    assert state["effective_max_running_requests_per_dp"] == 16 and state["world_size"] == 4
    assert state["disaggregation_mode"] == "null" and isinstance(state["decode_cuda_graph_bs"], list)
    assert set(state["memory_usage"]) == MEMORY_USAGE_KEYS and set(state["memory_usage"]["graph"]) == GRAPH_KEYS
    assert state["memory_usage"]["token_capacity"] == 4096
    assert {"last_gen_throughput", "decode_cuda_graph_memory_gb", "startup_time", "model_path"} <= set(state)
    deprecated = client.get("/get_server_info")
    assert deprecated.status_code == 200 and set(deprecated.json()) == set(info)
    assert "Endpoint '/get_server_info' is deprecated" in sim.log()


def test_model_info(client: httpx.Client) -> None:
    for path in ("/model_info", "/get_model_info"):
        body = client.get(path).json()
        assert set(body) == MODEL_INFO_KEYS, path
        assert body["architectures"] == ["DeepseekV4ForCausalLM"] and body["model_type"] == "deepseek_v4"
        assert body["served_model_name"] == "dsv4" and body["disaggregation_mode"] == "null"


def test_models(client: httpx.Client) -> None:
    body = client.get("/v1/models").json()
    assert body["object"] == "list"
    (card,) = body["data"]
    assert set(card) == {"id", "object", "created", "owned_by", "root", "parent", "max_model_len"}
    assert (card["id"], card["root"], card["owned_by"], card["parent"]) == ("dsv4", "dsv4", "sglang", None)
    assert card["max_model_len"] == 8192
    assert client.get("/v1/models/dsv4").json() == card
    r = client.get("/v1/models/nope")
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "message": "The model 'nope' does not exist",
            "type": "invalid_request_error",
            "param": "model",
            "code": "model_not_found",
        }
    }


def test_loads(client: httpx.Client) -> None:
    body = client.get("/v1/loads").json()
    assert set(body) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    (load,) = body["loads"]
    assert LOAD_CORE_KEYS <= set(load) and {"memory", "queues"} <= set(load)
    assert load["max_running_requests"] == 16 and load["max_total_num_tokens"] == 4096
    assert set(load["memory"]) == {"weight_gb", "kv_cache_gb", "graph_gb", "token_capacity"}
    assert set(load["queues"]) == {"waiting", "grammar", "paused", "retracted", "prealloc_ready"}
    (core,) = client.get("/v1/loads", params={"include": "core"}).json()["loads"]
    assert set(core) == LOAD_CORE_KEYS
    assert client.get("/v1/loads", params={"include": "bogus"}).status_code == 400
    text = client.get("/v1/loads", params={"format": "prometheus"}).text
    assert '# TYPE sglang_num_running_reqs gauge\nsglang_num_running_reqs{dp_rank="0"} 0' in text
    assert 'sglang_memory_token_capacity{dp_rank="0"} 4096' in text


def test_flush_cache(client: httpx.Client) -> None:
    r = client.post("/flush_cache")
    assert r.status_code == 200 and r.text.startswith("Cache flushed.\nPlease check backend logs")
    assert client.get("/flush_cache", params={"timeout": "-1"}).status_code == 400


# ---------------------------------------------------------------- generation


def test_generate(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "one two three", "sampling_params": {"max_new_tokens": 6}})
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {"text", "output_ids", "meta_info"}
    meta = body["meta_info"]
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 6 and len(body["output_ids"]) == 6
    assert meta["finish_reason"] == {"type": "length", "length": 6}
    assert len(body["text"].split()) == 6
    ids = client.post("/generate", json={"input_ids": [5, 6, 7, 8], "sampling_params": {"max_new_tokens": 1}})
    assert ids.json()["meta_info"]["prompt_tokens"] == 4
    default = client.post("/generate", json={"text": "x"}).json()["meta_info"]
    assert default["completion_tokens"] == 128  # SGLang's default max_new_tokens
    missing = client.post("/generate", json={"sampling_params": {}})
    assert missing.status_code == 400
    assert missing.json() == {"error": {"message": "Either text, input_ids or input_embeds should be provided."}}


def test_generate_stream(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": "a b", "sampling_params": {"max_new_tokens": 5}, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[-1]["meta_info"]["completion_tokens"] == 5
    assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])


def test_completions_and_chat(client: httpx.Client) -> None:
    r = client.post("/v1/completions", json={"model": "dsv4", "prompt": "hi there", "max_tokens": 4})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["finish_reason"] == "length" and len(body["choices"][0]["text"].split()) == 4
    assert body["usage"]["prompt_tokens"] == 2 and body["usage"]["completion_tokens"] == 4
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}  # --enable-cache-report
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    r = client.post("/v1/chat/completions", json={"model": "dsv4", "messages": msgs, "max_tokens": 3})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant" and body["usage"]["completion_tokens"] == 3
    assert body["usage"]["prompt_tokens"] == 2 + 2 + 2 + 1 + 1  # documented chat token rule
    free = client.post("/v1/chat/completions", json={"model": "dsv4", "messages": msgs}).json()
    assert free["choices"][0]["finish_reason"] == "stop" and free["choices"][0]["matched_stop"] == 1
    assert free["usage"]["completion_tokens"] == 128  # simulated EOS without max_tokens


def test_chat_stream(client: httpx.Client) -> None:
    payload = {
        "model": "dsv4",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    r = client.post("/v1/chat/completions", json=payload)
    assert r.status_code == 200
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"]["content"] for c in chunks if c["choices"])
    assert len(text.split()) == 6
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"


# ---------------------------------------------------------------- limits (reference section 3)


def test_input_longer_than_context(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": words(8192), "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": TOO_LONG.format(n=8192)}}
    r = client.post("/v1/completions", json={"model": "dsv4", "prompt": words(9000), "max_tokens": 1})
    assert r.status_code == 400
    assert r.json() == {
        "object": "error",
        "message": TOO_LONG.format(n=9000),
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


def test_input_plus_output_longer_than_context(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": words(100), "sampling_params": {"max_new_tokens": 8100}})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": TOO_MANY.format(t=8200, i=100, m=8100)}}
    msgs = [{"role": "user", "content": words(97)}]  # 97 + 2 + 1 = 100 tokens
    r = client.post("/v1/chat/completions", json={"model": "dsv4", "messages": msgs, "max_tokens": 8100})
    assert r.status_code == 400
    body = r.json()
    assert body["message"] == TOO_MANY.format(t=8200, i=100, m=8100)
    assert (body["object"], body["type"], body["code"]) == ("error", "BadRequestError", 400)
    r = client.post("/v1/chat/completions", json={"model": "dsv4", "messages": msgs, "max_tokens": 9000})
    assert r.json()["message"] == (
        "max_completion_tokens is too large: 9000.This model supports at most 8192 completion tokens."
    )


def test_input_longer_than_the_pool_allows(client: httpx.Client) -> None:
    r = client.post("/generate", json={"input_ids": [1] * 5000, "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400
    assert r.json() == {"error": {"message": OVER_POOL.format(n=5000)}}
    # Inside the context but beyond the pool: max_new_tokens is clipped to max_req_len - input - 1.
    r = client.post("/generate", json={"input_ids": [1] * 4000, "sampling_params": {"max_new_tokens": 500}})
    assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 4095 - 4000 - 1


def test_streaming_generate_reports_limit_in_the_stream(client: httpx.Client) -> None:
    r = client.post("/generate", json={"text": words(8192), "stream": True})
    assert r.status_code == 200
    events = sse(r.text)
    assert events[-1] == "[DONE]"
    assert json.loads(events[0]) == {
        "error": {"message": TOO_LONG.format(n=8192), "type": "invalid_request_error", "code": 400, "retryable": False}
    }


# ---------------------------------------------------------------- metrics


def test_metrics(client: httpx.Client, sim: Sim) -> None:
    client.post("/generate", json={"text": "m", "sampling_params": {"max_new_tokens": 2}})
    text = httpx.get(sim.url + "/metrics", timeout=5).text
    labels = 'model_name="dsv4",engine_type="unified",tp_rank="0",pp_rank="0",moe_ep_rank="0"'
    for line in (
        f"sglang:max_total_num_tokens{{{labels}}} 4096.0",
        f"sglang:context_len{{{labels}}} 8192.0",
        f"sglang:page_size{{{labels}}} 256.0",
        f"sglang:num_running_reqs{{{labels}}} ",
        f"sglang:num_queue_reqs{{{labels}}} ",
        f"sglang:token_usage{{{labels}}} ",
        f"sglang:num_used_tokens{{{labels}}} ",
    ):
        assert line in text, line
    for name in (
        "sglang:num_requests_total",
        "sglang:prompt_tokens_total",
        "sglang:generation_tokens_total",
        "sglang:time_to_first_token_seconds_bucket",
        "sglang:time_to_first_token_seconds_count",
    ):
        assert f'{name}{{model_name="dsv4",engine_type="unified"' in text, name
    assert "# TYPE sglang:time_to_first_token_seconds histogram" in text
    assert text.count("# TYPE sglang:time_to_first_token_seconds ") == 1
    # the inter-token latency: SGLang's collector labels only (no is_streaming), one gap after the first token
    assert "# TYPE sglang:inter_token_latency_seconds histogram" in text
    itl = [line for line in text.splitlines() if line.startswith("sglang:inter_token_latency_seconds_count")]
    assert len(itl) == 1 and itl[0].startswith(
        'sglang:inter_token_latency_seconds_count{model_name="dsv4",engine_type="unified"} '
    )
    assert float(itl[0].rsplit(" ", 1)[1]) >= 1
    requests = sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("sglang:num_requests_total{")
    )
    assert requests >= 1
