"""Long-context recall of the simulated DeepSeek-V4 model, and the fp8 index-key bug (README.md, "Recall").

A prompt may hold needles, "... secret key for <name> is <value> ...", and a question about one of them,
"... secret key for <name>?" (the phrase not followed by "is"). The simulated model answers with the value of
the last needle for that name before the question, as its first generated word, when its sparse attention can
still select the needle:
- bf16 index keys (SGLANG_DSV4_BF16_INDEX_K=1 or true): always;
- fp8 index keys (upstream): only when the value sits at most FP8_RECALL_TOKENS tokens before the question,
  the recall failure DeepSeek-V4 shows on SGLang's fp8 indexer keys. Otherwise the answer is the usual synthetic
  text, without the value.

Positions are token positions of the simulator's tokenizer (one token per word). Deterministic: no randomness.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# How far back (tokens from the question to the needle's value) fp8 index keys still find a needle.
FP8_RECALL_TOKENS = 2000
PHRASE = ("secret", "key", "for")
TRAILING = ".,;:!?\"')"


def bf16_index_k_switch(env: Mapping[str, str]) -> bool:
    """SGLANG_DSV4_BF16_INDEX_K as the patched SGLang reads it: "1", or "true" in any case."""
    value = env.get("SGLANG_DSV4_BF16_INDEX_K", "")
    return value == "1" or value.lower() == "true"


def _clean(word: str) -> str:
    return word.strip(TRAILING).lower()


def answer(words: Sequence[str], bf16_index_k: bool) -> str | None:
    """The needle value the simulated model answers with, or None (no question, no needle, or not recalled)."""
    needles: list[tuple[int, str, str]] = []  # (position of the value, name, value)
    question: tuple[int, str] | None = None
    for i in range(len(words) - len(PHRASE)):
        if tuple(_clean(w) for w in words[i : i + 3]) != PHRASE:
            continue
        name = _clean(words[i + 3])
        if i + 5 < len(words) and _clean(words[i + 4]) == "is":
            needles.append((i + 5, name, words[i + 5].strip(TRAILING)))
        else:
            question = (i, name)
    if question is None:
        return None
    at, name = question
    found = [(pos, value) for pos, needle, value in needles if needle == name and pos < at]
    if not found:
        return None
    pos, value = found[-1]
    if not bf16_index_k and at - pos > FP8_RECALL_TOKENS:
        return None
    return value or None
