#!/usr/bin/env python3
"""Long-context recall probe (needle in a haystack) against any SGLang-compatible base URL.

Usage: python3 recall_probe.py '<JSON config>'   (built by verify/test_verify_recall.py), or
``run_recall(base_url, ...)`` from Python (tests/component/sim/test_sim_recall.py). Standard library only: it runs on
the router host, whose router may listen on loopback only.

Each case is one prompt of about `length` tokens: filler sentences with one needle sentence, "the secret key for
<name> is <value>.", at `depth` (0 = the start of the haystack, 1 = right before the question), and the question
"what is the secret key for <name>?" at the end. The case passes when the answer contains <value>. The needle
sits about (1 - depth) * length tokens before the question. DeepSeek-V4 with fp8 indexer keys (SGLang upstream,
or a deploy that lost SGLANG_DSV4_BF16_INDEX_K) misses needles more than about 2,000 tokens back; with bf16 keys
it finds them all. The default grid is the operators' validation: 4.5K, 8K, 12K and 22.6K tokens at three depths.

Lengths are in the served model's tokens: one calibration request measures tokens per filler word from the
prompt_tokens the server reports. Requests go one at a time (`route` "chat": /v1/chat/completions; "generate":
/generate), temperature 0. The API key, if any, is read from an environment file and never printed.

Config keys: url (required), api_key_file, route, lengths, depths, max_new_tokens, timeout_s, model.
Exit status: 0 when the probe ran (the verdict, "passed", is for the caller), 1 on a bad config.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import sys
import time
import urllib.parse
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import api_key_file

LENGTHS = (4500, 8000, 12000, 22600)
DEPTHS = (0.1, 0.5, 0.9)
FILLER = (
    "The river bends twice before it reaches the old mill at the edge of the valley.",
    "Farmers in the region plant barley in spring and harvest it late in the summer.",
    "A narrow road climbs the hill past a row of stone houses with red shutters.",
    "In the evening the market square fills with people buying bread and fresh fruit.",
    "The library keeps its oldest maps in a cool room on the second floor.",
    "Most of the town's bridges were rebuilt after the flood three decades ago.",
    "Children walk to the school by the lake, where the water is calm in the morning.",
    "The weather station on the ridge records wind speed and rainfall every hour.",
)
CALIBRATION_WORDS = 1000
ERROR_CHARS = 400


def needle(length: int, depth: float) -> tuple[str, str]:
    """A deterministic (name, value) for one case."""
    digest = hashlib.sha256(f"{length}:{depth}".encode()).hexdigest()
    return f"vault-{digest[:4]}", f"{int(digest[4:12], 16) % 10**8:08d}"


def filler_words(count: int) -> list[list[str]]:
    """Filler sentences (as word lists) totalling at least `count` words."""
    sentences: list[list[str]] = []
    total = 0
    while total < count:
        words = FILLER[len(sentences) % len(FILLER)].split()
        sentences.append(words)
        total += len(words)
    return sentences


def haystack(words: int, depth: float, name: str, value: str) -> tuple[str, int]:
    """The prompt of about `words` words with the needle at `depth`; returns it and the filler words after the
    needle (how far back it sits, in words)."""
    sentences = filler_words(words)
    target = round(max(0.0, min(1.0, depth)) * words)
    at, seen = len(sentences), 0
    for index, sentence in enumerate(sentences):
        if seen >= target:
            at = index
            break
        seen += len(sentence)
    after = sum(len(s) for s in sentences[at:])
    sentences.insert(at, f"Remember this: the secret key for {name} is {value}.".split())
    question = f"Question: what is the secret key for {name}? Answer with the key only.".split()
    text = " ".join(" ".join(s) for s in sentences) + "\n\n" + " ".join(question)
    return text, after


class Client:
    def __init__(self, base_url: str, api_key: str | None, timeout_s: float) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or (443 if parsed.scheme == "https" else 80)
        self.https = parsed.scheme == "https"
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        kind = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = kind(self.host, self.port, timeout=self.timeout_s)
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers=self.headers)
            resp = conn.getresponse()
            raw = resp.read().decode(errors="replace")
            try:
                return resp.status, json.loads(raw)
            except ValueError:
                return resp.status, raw[:ERROR_CHARS]
        finally:
            conn.close()


def ask(client: Client, route: str, prompt: str, max_new_tokens: int, model: str | None) -> dict[str, Any]:
    """One request; returns status, the answer text and the prompt tokens the server counted."""
    if route == "generate":
        body: dict[str, Any] = {
            "text": prompt,
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0},
        }
        status, data = client.post("/generate", body)
        ok = status == 200 and isinstance(data, dict)
        text = str(data.get("text", "")) if ok else ""
        tokens = (data.get("meta_info") or {}).get("prompt_tokens") if ok else None
    else:
        body = {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_new_tokens,
            "temperature": 0,
        }
        if model:
            body["model"] = model
        status, data = client.post("/v1/chat/completions", body)
        ok = status == 200 and isinstance(data, dict) and bool(data.get("choices"))
        message = (data["choices"][0].get("message") or {}) if ok else {}
        text = " ".join(str(message.get(k) or "") for k in ("reasoning_content", "content")).strip()
        tokens = (data.get("usage") or {}).get("prompt_tokens") if ok else None
    out: dict[str, Any] = {"status": status, "answer": text[:ERROR_CHARS], "prompt_tokens": tokens}
    if not ok:
        out["error"] = str(data)[:ERROR_CHARS]
    return out


def run_recall(
    base_url: str,
    *,
    api_key: str | None = None,
    route: str = "chat",
    lengths: tuple[int, ...] | list[int] = LENGTHS,
    depths: tuple[float, ...] | list[float] = DEPTHS,
    max_new_tokens: int = 32,
    timeout_s: float = 300.0,
    model: str | None = None,
) -> dict[str, Any]:
    """Run every (length, depth) case against base_url; "passed" is true when every needle came back."""
    if route not in ("chat", "generate"):
        raise ValueError(f"route must be chat or generate, not {route!r}")
    client = Client(base_url, api_key, timeout_s)
    sample = " ".join(" ".join(s) for s in filler_words(CALIBRATION_WORDS))
    calibration = ask(client, route, sample, 1, model)
    if calibration["status"] != 200 or not calibration["prompt_tokens"]:
        return {"url": base_url, "route": route, "passed": False, "cases": [], "error": f"calibration: {calibration}"}
    tokens_per_word = float(calibration["prompt_tokens"]) / len(sample.split())
    cases = []
    for length in lengths:
        for depth in depths:
            name, value = needle(length, depth)
            prompt, after = haystack(max(1, round(length / tokens_per_word)), depth, name, value)
            started = time.monotonic()
            try:
                result = ask(client, route, prompt, max_new_tokens, model)
            except (OSError, http.client.HTTPException) as exc:
                result = {"status": None, "answer": "", "prompt_tokens": None, "error": repr(exc)[:ERROR_CHARS]}
            cases.append(
                {
                    "length": length,
                    "depth": depth,
                    "needle_tokens_back": round(after * tokens_per_word),
                    "value": value,
                    "found": result["status"] == 200 and value in result["answer"],
                    "seconds": round(time.monotonic() - started, 3),
                    **result,
                }
            )
    return {
        "url": base_url,
        "route": route,
        "tokens_per_word": round(tokens_per_word, 4),
        "passed": bool(cases) and all(c["found"] for c in cases),
        "cases": cases,
    }


def failures(result: dict[str, Any]) -> list[str]:
    """One line per missed case (or the probe's own error)."""
    if result.get("error"):
        return [str(result["error"])]
    return [
        f"{c['length']} tokens, depth {c['depth']} (needle ~{c['needle_tokens_back']} tokens back): "
        + (f"answer {c['answer']!r} lacks {c['value']}" if c["status"] == 200 else f"{c['status']} {c.get('error')}")
        for c in result["cases"]
        if not c["found"]
    ]


def main(argv: list[str]) -> int:
    try:
        config = json.loads(argv[1])
        url = str(config["url"])
    except (IndexError, ValueError, KeyError, TypeError) as exc:
        print(json.dumps({"error": f"bad config: {exc!r}"}))
        return 1
    result = run_recall(
        url,
        api_key=api_key_file(config.get("api_key_file")),
        route=str(config.get("route", "chat")),
        lengths=[int(x) for x in config.get("lengths", LENGTHS)],
        depths=[float(x) for x in config.get("depths", DEPTHS)],
        max_new_tokens=int(config.get("max_new_tokens", 32)),
        timeout_s=float(config.get("timeout_s", 300)),
        model=config.get("model"),
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
