"""The flag codec: envelope -> argv/environment for the serve scripts, and argv/environment -> envelope.

Rendering and parsing live here only, so the on-disk and running layers are read back with the same rules
that wrote them.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from .sglang_argspec import table_for
from .sglang_schema import BY_NAME, EnvelopeError, Key, keys_for

API_KEY_VAR = "SGLANG_API_KEY"  # the environment variable the serve scripts read the API key from
SECRET_PLACEHOLDER = {"api_key": "${" + API_KEY_VAR + "}"}
REDACTED = "<redacted>"


def to_argv(role: str, envelope: Mapping[str, Any], secrets_as_env: bool = True) -> list[str]:
    """Flags for one server in schema order; unset (None) keys are not rendered, secrets become env refs."""
    argv: list[str] = []
    for key in keys_for(role):
        if key.flag is None or envelope.get(key.name) is None:
            continue
        value = envelope[key.name]
        if key.secret and secrets_as_env:
            argv += [key.flag, SECRET_PLACEHOLDER[key.name]]
            continue
        argv += key.type.render(str(key.flag), value)
    return argv


def to_environ(role: str, envelope: Mapping[str, Any]) -> dict[str, str]:
    """Environment variables an envelope sets (e.g. SGLANG_DSV4_BF16_INDEX_K=1)."""
    env = {}
    for key in keys_for(role):
        if key.env and envelope.get(key.name) is not None:
            value = envelope[key.name]
            env[key.env] = key.type.to_env(value)
    return env


def render_args(role: str, envelope: Mapping[str, Any]) -> list[str]:
    """Argv split into one `--flag value` group per line, shell-quoted, for a readable serve script."""
    lines: list[str] = []
    for token in to_argv(role, envelope):
        if token.startswith("--") or not lines:
            lines.append(shlex.quote(token))
        else:  # a value: an env reference stays expandable, anything else is quoted as it is
            lines[-1] += " " + (f'"{token}"' if token.startswith("${") else shlex.quote(token))
    return lines


def _resolve(role: str, flag: str) -> Key | None:
    """The envelope key an option string sets, as the role's parser reads it: any of the dest's option
    strings (`--tensor-parallel-size`), or a unique prefix of one (argparse's allow_abbrev: `--tp`)."""
    table = table_for(role)
    matches = {f.dest for f in table.values() for opt in f.options if opt == flag}
    if not matches:
        matches = {f.dest for f in table.values() for opt in f.options if opt.startswith(flag)}
    if len(matches) != 1:
        return None
    key = BY_NAME.get(matches.pop())
    return key if key is not None and role in key.roles and key.flag is not None else None


def from_argv(role: str, argv: Sequence[str]) -> dict[str, Any]:
    """Envelope keys found in an engine or router argv; unknown flags are skipped, secrets redacted."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        token = argv[i]
        flag, _sep, inline = token.partition("=")
        key = _resolve(role, flag) if flag.startswith("--") else None
        i += 1
        if key is None:
            continue
        if key.type.nargs == 0:
            out[key.name] = key.type.parse([])
            continue
        values: list[str] = [inline] if inline else []
        if not inline and key.type.nargs == "+":
            while i < len(argv) and not argv[i].startswith("--"):
                values.append(argv[i])
                i += 1
        elif not inline and i < len(argv):
            values.append(argv[i])
            i += 1
        if not values:
            raise EnvelopeError(f"flag {flag} has no value in the command line")
        try:
            out[key.name] = REDACTED if key.secret else key.type.parse(values)
        except ValueError as exc:  # a script edited on the host: name the flag, not the int() that refused it
            shown = " ".join(values)
            raise EnvelopeError(
                f"flag {flag} has the value {shown!r}, not a valid {key.type.name}: the server refuses it at start; "
                "site.yml writes the declared value back"
            ) from exc
    return out


def from_environ(role: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """Envelope keys carried by environment variables."""
    out: dict[str, Any] = {}
    for key in keys_for(role):
        if key.env:
            raw = environ.get(key.env)
            out[key.name] = key.type.from_env(raw)
    return out


def parse_env_file(text: str) -> dict[str, str]:
    """KEY=value lines of a systemd EnvironmentFile (quotes stripped, comments skipped)."""
    env = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _sep, value = line.partition("=")
        env[name.strip()] = value.strip().strip('"').strip("'")
    return env


def secret_environ(api_key: str, redacted: bool = False) -> dict[str, str]:
    """The environment file's secret variables: the API key under API_KEY_VAR when one is declared (else none), or
    REDACTED in its place where the file is previewed, not written."""
    return {API_KEY_VAR: REDACTED if redacted else api_key} if api_key else {}


def api_key_in(env_text: str | None) -> str | None:
    """The API key an environment file holds (SGLANG_API_KEY), or None."""
    return (parse_env_file(env_text).get(API_KEY_VAR) or None) if env_text else None


def api_key_file(path: str | None) -> str | None:
    """The API key of the environment file at `path` (a server's, on its host), or None: no path, no file, no key."""
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            return api_key_in(handle.read())
    except OSError:
        return None


def parse_script(text: str) -> list[str]:
    """The argv of the `exec` line of a serve script (line continuations joined)."""
    joined = text.replace("\\\n", " ")
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped.startswith("exec "):
            return shlex.split(stripped[len("exec ") :])
    raise EnvelopeError("the serve script has no exec line; fix: redeploy it from the template")
