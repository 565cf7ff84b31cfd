"""Parse engine command lines with SGLang 0.5.23's own parser; run inside the parser venv.

Reads a JSON list of argv lists on stdin, prints a JSON list of {"ok", "error", "args"} results.
triton is stubbed: sglang imports it at module load, but parsing never uses it.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import types


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


def main() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:
        for name in ("triton", "triton.language"):
            sys.modules[name] = _Stub(name)
    from sglang.srt.server_args import prepare_server_args

    results = []
    for argv in json.load(sys.stdin):
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = prepare_server_args(argv)
            resolved = args.resolved_dict()
            results.append({"ok": True, "error": "", "args": json.loads(json.dumps(resolved, default=str))})
        except SystemExit as exc:
            message = err.getvalue().strip().splitlines()[-1:] or [""]
            results.append({"ok": False, "error": f"exit {exc.code}: {message[0]}", "args": {}})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
