"""The deep check: SGLang 0.5.23's and smg 1.13.0's own startup checks on the command lines a deployment renders.

Each engine line is built as the roles build it (sglang_declared.engine_envelope, then the flag codec's to_argv
and to_environ, plus sglang_engine_extra_env), each router line likewise (--pd-disaggregation, the worker
lists, the codec, sglang_router_extra_args). The engine lines run through SGLang's own pipeline in the parser
venv (roles/sglang_validate/files/sglang_startup_check.py), the router lines through smg's own checks
(smg_startup_check.py), on the controller. One difference from the hosts: `--model-path` names the controller's
models/<sglang_model.name>/ directory, since the host path does not exist here; SGLang reads the model's
config.json there, as it would on the host.

A refusal becomes a problem naming the declared variable behind each flag it involves (the codec maps flag to
envelope key; sglang_declared says which dict declared it). Results are cached by a hash of the line, the model
config, the checkers and the installed SGLang/smg under .cache/deep-check/.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    declared_var,
    engine_envelope,
    model_config_path,
    router_argv_workers,
    router_envelope,
    router_mesh,
    workers,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_flags import to_argv, to_environ
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import (
    ENGINE_ROLES,
    EnvelopeError,
    keys_for,
    normal_form,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths

COLLECTION = Path(__file__).resolve().parents[2]
FILES_DIR = COLLECTION / "roles" / "sglang_validate" / "files"
SGLANG_CHECKER = "sglang_startup_check.py"
SMG_CHECKER = "smg_startup_check.py"
ROUTER_EXTRA_ARGS = ("--disable-tokenizer-autoload",)  # roles/sglang_router/defaults: sglang_router_extra_args
SECRET_SET = "<set>"
SGLANG = "SGLang 0.5.23"
SMG = "smg 1.13.0"


@dataclass
class Line:
    """One server's rendered command line and where each of its flags was declared."""

    host: str
    role: str
    argv: list[str]
    environ: dict[str, str] = field(default_factory=dict)
    # flag or environment variable -> (declared variable, declared value)
    sources: dict[str, tuple[str, Any]] = field(default_factory=dict)

    @property
    def tool(self) -> str:
        return "smg" if self.role == "router" else "sglang"


def engine_line(host: str, role: str, hostvars: Mapping[str, Any], models_dir: Path) -> Line:
    """The engine's flags as the serve script renders them, with --model-path on the controller's copy."""
    envelope = engine_envelope(role, hostvars)
    if hostvars.get("sglang_api_key"):
        envelope["api_key"] = SECRET_SET
    argv = to_argv(role, envelope)
    model = hostvars.get("sglang_model") or {}
    if "--model-path" in argv:
        argv[argv.index("--model-path") + 1] = str(models_dir / str(model.get("name")))
    extra_env = {str(k): str(v) for k, v in (hostvars.get("sglang_engine_extra_env") or {}).items()}
    line = Line(host, role, argv, {**to_environ(role, envelope), **extra_env})
    for key in keys_for(role):
        if envelope.get(key.name) is None:
            continue
        shown = SECRET_SET if key.secret else envelope[key.name]
        if key.name == "base_gpu_id" and "base_gpu_id" not in (hostvars.get(f"sglang_{role}") or {}):
            shown = envelope.get("gpu_ids", shown)
        for name in (key.flag, key.env):
            if name:
                line.sources[name] = (declared_var(role, hostvars, key.name), shown)
    for name, value in extra_env.items():
        line.sources[name] = (f"sglang_engine_extra_env.{name}", value)
    return line


def router_line(
    host: str, hostvars: Mapping[str, Any], all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Any]
) -> Line:
    """The router's flags as its serve script renders them (roles/sglang_router/tasks/spec.yml), smg's mesh flags
    included where the inventory has several routers."""
    names = {g: list(groups.get(g, [])) for g in GROUPS.values()}
    envelope = {**router_envelope(hostvars), **router_mesh(all_hostvars, names, host)}
    if hostvars.get("sglang_api_key"):
        envelope["api_key"] = SECRET_SET
    extra = [str(a) for a in hostvars.get("sglang_router_extra_args", ROUTER_EXTRA_ARGS)]
    argv = ["--pd-disaggregation", *router_argv_workers(workers(all_hostvars, names)), *to_argv("router", envelope)]
    line = Line(host, "router", [*argv, *extra])
    for key in keys_for("router"):
        if key.flag and envelope.get(key.name) is not None:
            value = SECRET_SET if key.secret else envelope[key.name]
            declared = key.derived or ("sglang_api_key" if key.secret else f"sglang_router.{key.name}")
            line.sources[key.flag] = (declared, value)
    line.sources["--prefill"] = ("the inventory group sglang_prefill (worker URLs and bootstrap ports)", None)
    line.sources["--decode"] = ("the inventory group sglang_decode (worker URLs)", None)
    for arg in extra:
        if arg.startswith("--"):
            line.sources.setdefault(arg, ("sglang_router_extra_args", extra))
    return line


def command_lines(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Any], models_dir: str | Path
) -> tuple[list[Line], list[str]]:
    """Every server's line, and the servers whose envelope cannot be built (validation reports why)."""
    lines: list[Line] = []
    skipped: list[str] = []
    for role in (*ENGINE_ROLES, "router"):
        for host in groups.get(GROUPS[role], []):
            try:
                if role == "router":
                    lines.append(router_line(host, all_hostvars[host], all_hostvars, groups))
                else:
                    lines.append(engine_line(host, role, all_hostvars[host], Path(models_dir)))
            except (EnvelopeError, KeyError, TypeError, ValueError) as exc:
                skipped.append(f"{host} {role}: {exc}")
    return lines, skipped


def _installed(python: str, dist: str) -> list[str]:
    """The installed distribution directories of `dist` next to `python` (the cache key's version part)."""
    root = Path(python).absolute().parents[1]  # the venv, not the interpreter its bin/python links to
    return sorted(Path(p).name for p in glob.glob(str(root / "lib" / "python*" / "site-packages" / f"{dist}-*-info")))


def cache_key(line: Line, python: str, files_dir: Path, model_config: bytes) -> str:
    checker = files_dir / (SMG_CHECKER if line.tool == "smg" else SGLANG_CHECKER)
    parts = [checker.read_bytes()]
    if line.tool == "sglang":
        parts += [(files_dir / "sglang_cpu.py").read_bytes(), model_config]
    digest = hashlib.sha256()
    for part in parts:
        digest.update(hashlib.sha256(part).digest())
    digest.update(
        json.dumps(
            [line.tool, line.argv, sorted(line.environ.items()), _installed(python, line.tool)], sort_keys=True
        ).encode()
    )
    return digest.hexdigest()


def _read_cached(path: Path) -> dict[str, Any] | None:
    """A cached result, or None when there is none or it cannot be read (the line is then checked again)."""
    try:
        hit = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return hit if isinstance(hit, dict) else None


def run_checkers(
    lines: list[Line],
    sglang_python: str | None,
    smg_python: str | None,
    files_dir: Path = FILES_DIR,
    cache_dir: Path | None = None,
    model_config: bytes = b"",
    ablate: bool = True,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each line's result ({ok, error, culprits[, resolved]}); and stats (checked, cached, seconds).

    The SGLang lines go to one parser-venv process, the smg lines to one controller process, both at once."""
    started = time.monotonic()
    results: list[dict[str, Any] | None] = [None] * len(lines)
    keys: list[str | None] = [None] * len(lines)
    pending: dict[str, list[int]] = {"sglang": [], "smg": []}
    pythons = {"sglang": sglang_python, "smg": smg_python}
    for i, line in enumerate(lines):
        python = pythons[line.tool]
        if not python:
            continue
        keys[i] = cache_key(line, python, files_dir, model_config)
        cached = cache_dir / f"{keys[i]}.json" if cache_dir else None
        hit = _read_cached(cached) if cached is not None else None
        if hit is not None:
            results[i] = {**hit, "cached": True}
        else:
            pending[line.tool].append(i)
    # Both start at once; each reads its cases only after its imports, so answering smg first costs nothing.
    procs = {}
    for tool in ("smg", "sglang"):
        if not pending[tool]:
            continue
        cases = [
            {"id": str(i), "argv": lines[i].argv, "environ": lines[i].environ, "ablate": ablate} for i in pending[tool]
        ]
        checker = files_dir / (SMG_CHECKER if tool == "smg" else SGLANG_CHECKER)
        proc = subprocess.Popen(
            [str(pythons[tool]), str(checker)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs[tool] = (proc, checker, json.dumps({"cases": cases}))
    for tool, (proc, checker, request) in procs.items():
        out, err = proc.communicate(request, timeout=900)
        try:
            answers = json.loads(out)
        except ValueError:
            raise RuntimeError(
                f"{pythons[tool]} {checker} failed with exit status {proc.returncode}: "
                f"{(err.strip() or out.strip())[-2000:]}"
            ) from None
        for answer in answers:
            i = int(answer["id"])
            results[i] = {k: v for k, v in answer.items() if k != "id"}
            if cache_dir is not None and keys[i]:
                cache_dir.mkdir(parents=True, exist_ok=True)
                # Written aside, then renamed: a run beside this one never reads half a file.
                partial = cache_dir / f".{keys[i]}.{os.getpid()}.json"
                partial.write_text(json.dumps(results[i], sort_keys=True))
                os.replace(partial, cache_dir / f"{keys[i]}.json")
    stats = {
        "checked": sum(r is not None for r in results),
        "cached": sum(bool(r and r.get("cached")) for r in results),
        "seconds": round(time.monotonic() - started, 1),
    }
    return [r or {} for r in results], stats


def _shown(value: Any) -> str:
    return "" if value is None else f"={value!r}"


def problem(line: Line, result: Mapping[str, Any]) -> str | None:
    """The refusal of one line as a validation problem naming the declared variables behind it."""
    if not result or result.get("ok"):
        return None
    who = SMG if line.tool == "smg" else SGLANG
    what = "router" if line.role == "router" else f"{line.role} engine"
    named: list[tuple[str, Any]] = []
    for culprit in result.get("culprits") or []:
        var, value = line.sources.get(culprit, (f"the rendered flag {culprit}", None))
        if all(var != seen for seen, _value in named):
            named.append((var, value))
    if not named:
        fallback = "sglang_router" if line.role == "router" else f"sglang_engine_common / sglang_{line.role}"
        named = [(f"{fallback} (the flag behind it is not identified)", None)]
    subject = " with ".join(f"{line.host}: {var}{_shown(value)}" for var, value in named)
    fix = " or ".join(var for var, _value in named if not var.endswith("not identified)"))
    return (
        f"{subject}: {who} refuses the rendered {what} command line at startup: {result.get('error')}; "
        f"fix: change {fix or 'the declared envelope'} so that {who}'s own check accepts it"
    )


# Not compared with what SGLang resolved: the model path is the controller's copy of the model config here.
UNCOMPARED = frozenset({"model_path"})


def _same(declared: Any, resolved: Any) -> bool:
    if isinstance(declared, bool) or isinstance(resolved, bool):
        return bool(declared) == bool(resolved)
    try:
        return float(declared) == float(resolved)
    except (TypeError, ValueError):
        pass
    if isinstance(resolved, list) and len(resolved) == 1:
        resolved = resolved[0]
    return str(declared) == str(resolved)


def resolution_problems(line: Line, result: Mapping[str, Any]) -> list[str]:
    """A declared engine value that SGLang's own resolution changes: an error, since every layer of the answer would
    report the declared value while the engine runs another (a backend overridden, a page size forced, a cap
    lowered). The fix is to declare what SGLang runs."""
    if line.tool != "sglang" or not result.get("ok"):
        return []
    resolved = result.get("resolved") or {}
    out = []
    for flag, (var, declared) in line.sources.items():
        dest = flag[2:].replace("-", "_") if flag.startswith("--") else ""
        # "auto" asks SGLang to choose: what it chose is reported as such, not as a contradiction.
        if dest not in resolved or dest in UNCOMPARED or declared in (None, SECRET_SET, "auto"):
            continue
        if _same(normal_form(dest, declared), normal_form(dest, resolved[dest])):
            continue
        out.append(
            f"{line.host}: {var}={declared!r} is not what the {line.role} engine would run: {SGLANG}'s own resolution "
            f"of the rendered command line makes {dest} {resolved[dest]!r}, and every report would show the declared "
            f"value; fix: declare {var}: {resolved[dest]!r} (the value SGLang runs) or a value it keeps"
        )
    return out


def line_problems(line: Line, result: Mapping[str, Any]) -> list[str]:
    """Every problem of one line: its refusal at startup, or the declared values SGLang's resolution replaces."""
    refused = problem(line, result)
    return [refused] if refused else resolution_problems(line, result)


def _imports_smg(python: str) -> bool:
    try:
        return (
            subprocess.run([python, "-c", "import smg.launch_router"], capture_output=True, check=False).returncode == 0
        )
    except OSError:  # no such python, or not executable
        return False


def resolve_pythons(settings: Mapping[str, Any]) -> tuple[str | None, str | None, list[str]]:
    """The parser-venv and smg pythons to use under `mode` (auto|true|false), and the warnings for skips."""
    mode = str(settings.get("mode", "auto")).lower()
    if mode in ("false", "no", "off", "0"):
        return None, None, ["the deep check is off (sglang_validate_deep_check: false)"]
    parser = str(settings.get("parser_python") or "")
    smg = str(settings.get("smg_python") or "")
    warnings = []
    if not parser or not os.access(parser, os.X_OK):
        warnings.append(
            f"the deep check of the engine command lines is skipped: no SGLang parser venv at {parser or '(unset)'}; "
            "fix: run `make parser-venv`"
        )
        parser = ""
    if smg and not _imports_smg(smg):
        warnings.append(
            f"the deep check of the router command lines is skipped: {smg} cannot import smg; "
            "fix: run `make venv` (requirements/dev.txt installs smg==1.13.0)"
        )
        smg = ""
    elif not smg:
        warnings.append("the deep check of the router command lines is skipped: no smg python given")
    return parser or None, smg or None, warnings


def deep_check(
    all_hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, Any], settings: Mapping[str, Any]
) -> dict[str, Any]:
    """{problems, warnings, stats} of the deep check of every server of the inventory.

    settings: mode (auto|true|false), parser_python, smg_python, models_dir, model_name, cache_dir, files_dir.
    mode true turns a skip (no parser venv, no smg) into a problem."""
    sglang_python, smg_python, warnings = resolve_pythons(settings)
    mode = str(settings.get("mode", "auto")).lower()
    problems: list[str] = []
    if mode in ("true", "yes", "on", "1") and warnings:
        problems += [w.replace(" is skipped:", " cannot run (sglang_validate_deep_check: true):") for w in warnings]
        warnings = []
    if not sglang_python and not smg_python:
        return {"problems": problems, "warnings": warnings, "stats": {"checked": 0, "cached": 0, "seconds": 0}}
    models_dir = Path(str(settings.get("models_dir") or sglang_paths.models_dir()))
    lines, _sources = command_lines(all_hostvars, groups, models_dir.resolve())
    config_path = Path(model_config_path(models_dir, settings.get("model_name") or ""))
    model_config = config_path.read_bytes() if config_path.is_file() else b""
    cache_dir = settings.get("cache_dir")
    try:
        results, stats = run_checkers(
            lines,
            sglang_python,
            smg_python,
            Path(str(settings.get("files_dir") or FILES_DIR)),
            Path(str(cache_dir)) if cache_dir else None,
            model_config,
        )
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        return {"problems": [*problems, f"the deep check could not run: {exc}"], "warnings": warnings, "stats": {}}
    problems += [p for line, result in zip(lines, results, strict=True) for p in line_problems(line, result)]
    return {"problems": problems, "warnings": warnings, "stats": stats}
