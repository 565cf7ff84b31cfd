"""A deterministic stand-in tokenizer.

Rules (documented in README.md):
- text: one token per whitespace-separated word; the id is crc32(word) mod vocab_size;
- `input_ids` given by the client are used as they are;
- chat messages: each message costs 2 tokens (role marker + separator) plus its text's tokens, and the
  prompt ends with 1 token that opens the assistant turn;
- generated token i of a request is the word `tok<id>` with id = (i * 7919 + prompt_len) mod vocab_size, so
  the generated text tokenizes back to the same count; a recalled needle (recall.py) replaces word 0 (and its
  id is that word's).
"""

from __future__ import annotations

import zlib
from typing import Any

DEFAULT_VOCAB_SIZE = 129280


class Tokenizer:
    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self.vocab_size = max(2, int(vocab_size))

    def encode(self, text: str) -> list[int]:
        return [zlib.crc32(word.encode()) % self.vocab_size for word in text.split()]

    def output_ids(self, prompt_len: int, start: int, end: int, answer: str | None = None) -> list[int]:
        ids = [(i * 7919 + prompt_len) % self.vocab_size for i in range(start, end)]
        if answer and start == 0 and ids:
            ids[0] = self.encode(answer)[0]
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(f" tok{i}" for i in ids)

    def output_text(self, prompt_len: int, start: int, end: int, answer: str | None = None) -> str:
        """Generated tokens start..end as text; word 0 is the answer when there is one."""
        ids = [(i * 7919 + prompt_len) % self.vocab_size for i in range(start, end)]
        words = [f"tok{i}" for i in ids]
        if answer and start == 0 and words:
            words[0] = answer
        return "".join(f" {w}" for w in words)

    def chat_words(self, messages: list[Any]) -> list[str]:
        """The words (tokens) of a chat prompt (see the module rules). Raises ValueError on a malformed message."""
        words: list[str] = []
        for index, message in enumerate(messages):
            if not isinstance(message, dict) or "role" not in message:
                raise ValueError(f"messages[{index}] must be an object with a 'role'")
            words.extend(f"<|{message['role']}|> <|sep|>".split())
            words.extend(message_text(message.get("content")).split())
        words.append("<|assistant|>")
        return words


def message_text(content: Any) -> str:
    """The text of an OpenAI message content: a string, or a list of parts whose text parts are joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return " ".join(texts)
    raise ValueError("message content must be a string or a list of content parts")
