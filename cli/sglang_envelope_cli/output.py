"""What every command shares on its way out: the exit codes, text or one JSON document on stdout (--json), errors
and progress on stderr. docs/cli.md documents the codes and the JSON schema."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import asdict, is_dataclass
from importlib import metadata
from typing import Any

from rich.console import Console

# Exit codes, the same for every command.
ANSWERED = 0  # answered, and it fits (or there was nothing to judge)
DOES_NOT_FIT = 1  # answered, and it does not fit, is refused, or a measurement failed
BAD_INPUT = 2  # bad input or a missing prerequisite: no answer
CLOSED_PIPE = 141  # stdout closed by its reader (`| head`): 128 + SIGPIPE, as a shell reports such a program
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT (SIGTERM ends a running bench with 143, 128 + SIGTERM)

# The --json document: {"schema": SCHEMA, "command", "exit_code", "error", ...the command's own keys}. A key
# renamed or removed, or a meaning changed, raises the number; added keys do not.
SCHEMA = "sglang-envelope/1"
DISTRIBUTION = "sglang-dsv4-envelope"


def version() -> str:
    """This tool's version: the installed distribution's, which is the collection's (galaxy.yml)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def jsonable(value: Any) -> Any:
    """Dataclasses, mappings and sequences as JSON values; NaN and infinities become null."""
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    return value


class Output:
    """One command's output: text lines on stdout, or (json) the keys of one document printed at the end."""

    def __init__(self) -> None:
        self.start("", False)

    def start(self, command: str, as_json: bool) -> None:
        """A fresh output for `command`."""
        self.command = command
        self.json = as_json
        self.data: dict[str, Any] = {}
        self.error_text: str | None = None

    def say(self, text: str = "") -> None:
        """A line (or block) of the text output; nothing in JSON mode."""
        if not self.json:
            print(text, flush=True)

    def put(self, key: str, value: Any) -> None:
        """A key of the JSON document."""
        self.data[key] = jsonable(value)

    def add(self, key: str, value: Any) -> None:
        """An item of a list key of the JSON document."""
        self.data.setdefault(key, []).append(jsonable(value))

    def error(self, text: str) -> int:
        """`error: TEXT` on stderr (and the document's error); the bad-input exit code."""
        print(f"error: {text}", file=sys.stderr, flush=True)
        self.error_text = text
        return BAD_INPUT

    def document(self, code: int) -> str:
        head = {"schema": SCHEMA, "command": self.command, "exit_code": code, "error": self.error_text}
        return json.dumps({**head, **self.data}, indent=1, allow_nan=False)


OUT = Output()


@contextlib.contextmanager
def progress(text: str) -> Iterator[None]:
    """A spinner with `text` on stderr while a slow step runs, when stderr is a terminal (none in logs and pipes)."""
    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(text):
        yield
