"""Parse engine command lines with SGLang 0.5.23's own parser; run inside the parser venv.

Reads a JSON list of argv lists on stdin, prints a JSON list of {"ok", "error", "args", "not_options"}
results: `not_options` lists the --tokens of the argv that are no full option string of SGLang's parser (an
abbreviation such as --tp, which argparse's allow_abbrev would accept, lands there).

With --describe, prints SGLang's parser itself instead: {"options": [[option strings], ...] in registration
order (the --help action included), "dests": [...], "resolved_keys": [...]} (the keys of
ServerArgs.resolved_dict(), which /server_info serializes).
triton is stubbed: sglang imports it at module load, but parsing never uses it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import types
from pathlib import Path


class _Stub(types.ModuleType):
    """Stand-in module: every attribute is another stub; used as a decorator it returns the function."""

    def __getattr__(self, name: str) -> _Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Stub(f"{self.__name__}.{name}")
        setattr(self, name, sub)
        return sub

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return self


def _parser() -> argparse.ArgumentParser:
    """The parser exactly as sglang.srt.server_args.prepare_server_args builds it."""
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _describe() -> dict[str, object]:
    from sglang.srt.server_args import prepare_server_args

    parser = _parser()
    model = Path(__file__).resolve().parents[3] / "models" / "deepseek-v4-flash"
    with contextlib.redirect_stderr(io.StringIO()):
        resolved = prepare_server_args(["--model-path", str(model)]).resolved_dict()
    return {
        "options": [list(a.option_strings) for a in parser._actions],
        "dests": [a.dest for a in parser._actions],
        "resolved_keys": list(resolved),
        "resolved": json.loads(json.dumps(resolved, default=str)),
    }


def main() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:
        for name in ("triton", "triton.language"):
            sys.modules[name] = _Stub(name)
    if sys.argv[1:] == ["--describe"]:
        json.dump(_describe(), sys.stdout)
        return
    from sglang.srt.server_args import prepare_server_args

    options = {s for action in _parser()._actions for s in action.option_strings}
    results = []
    for argv in json.load(sys.stdin):
        flags = [token.split("=", 1)[0] for token in argv if token.startswith("--")]
        not_options = [flag for flag in flags if flag not in options]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = prepare_server_args(argv)
            resolved = args.resolved_dict()
            results.append(
                {
                    "ok": True,
                    "error": "",
                    "args": json.loads(json.dumps(resolved, default=str)),
                    "not_options": not_options,
                }
            )
        except SystemExit as exc:
            message = err.getvalue().strip().splitlines()[-1:] or [""]
            results.append(
                {"ok": False, "error": f"exit {exc.code}: {message[0]}", "args": {}, "not_options": not_options}
            )
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
