"""The README's operator quick start, run as a new operator runs it: the commands of its block, exactly and in order,
in one shell, by an unprivileged user (a system user made for the test when run as root), in a fresh copy of the
tracked files (no venv, no cache, no report: `make venvs` builds every venv there from the package index).
capacity answers with production's figures (0), plan answers that 100 calls of 200k do not fit today, with times
from AIConfigurator (1), and the render playbook validates, renders and deep-checks the production inventory (0).
Minutes: the venvs are built, the time model and the deep check run without a cache."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from deploytools import tracked_copy
from unit.unituser import unit_user

REPO = Path(__file__).resolve().parents[3]
# What an operator's machine brings to the shell: its package index settings and proxies, its locale.
KEPT_ENV = ("PIP_", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "LANG", "LC_")


def quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- quick-start.*?-->\n```bash\n(.*?)```\n<!-- /quick-start -->", text, re.DOTALL)
    assert block, "the README has no quick-start block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


@dataclass(frozen=True)
class Ran:
    command: str
    code: int
    seconds: float
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Operator:
    checkout: Path
    ran: dict[str, Ran]  # each command of the block by its first two words


@contextmanager
def unprivileged() -> Iterator[tuple[str, list[str]]]:
    """(uid:gid, prefix running a command as that user): a fresh system user when this process is root, else
    itself (no prefix)."""
    if os.geteuid() != 0:
        yield f"{os.geteuid()}:{os.getegid()}", []
        return
    with unit_user() as user:
        yield f"{user.uid}:{user.gid}", ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]


def run_block(home: Path, owner: str, prefix: list[str]) -> Operator:
    """The block's commands, one after the other in one shell, by the user, in a fresh copy under home; each in a
    group whose output the test keeps, so the command's own redirections hold."""
    checkout, logs = home / "sglang-dsv4", home / "logs"
    tracked_copy(checkout)
    logs.mkdir()
    script = [
        f"_t0=$(date +%s.%N); {{ {command}\n}} >{logs}/{i}.out 2>{logs}/{i}.err; echo $? $_t0 $(date +%s.%N) "
        f">{logs}/{i}.rc"
        for i, command in enumerate(quick_start())
    ]
    if prefix:  # made by root for the user
        subprocess.run(["chown", "-R", owner, str(home)], check=True)
    env = {k: v for k, v in os.environ.items() if k.startswith(KEPT_ENV)}
    env |= {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "SHELL": "/bin/bash"}
    subprocess.run([*prefix, "bash", "-c", "\n".join(script)], cwd=checkout, env=env, timeout=3600, check=False)
    ran: dict[str, Ran] = {}
    for i, command in enumerate(quick_start()):
        code, start, end = (logs / f"{i}.rc").read_text().split()
        seconds = float(end) - float(start)
        out, err = (logs / f"{i}.out").read_text(), (logs / f"{i}.err").read_text()
        ran[" ".join(shlex.split(command)[:2])] = Ran(command, int(code), seconds, out, err)
        print(f"$ {command}  -> {code} in {seconds:.0f} s")
    return Operator(checkout, ran)


@pytest.fixture(scope="module")
def operator() -> Iterator[Operator]:
    with unprivileged() as (owner, prefix):
        home = Path(tempfile.mkdtemp(prefix="sglang-operator-"))
        try:
            yield run_block(home, owner, prefix)
        finally:
            shutil.rmtree(home, ignore_errors=True)


def shown(done: Ran) -> str:
    return f"$ {done.command} -> {done.code}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_the_quick_start_block_names_the_operator_s_commands_in_order() -> None:
    commands = quick_start()
    assert commands[:2] == ["make venvs", "source .venv/bin/activate"]
    assert [c.split()[0:2] for c in commands[2:]] == [
        ["sglang-envelope", "capacity"],
        ["sglang-envelope", "plan"],
        ["python3", "-c"],  # the API key into the inventory's vault file, which validation asks for
        ["ansible-playbook", "-i"],
    ]


def test_make_venvs_builds_every_venv_in_the_copy(operator: Operator) -> None:
    done = operator.ran["make venvs"]
    assert done.code == 0, shown(done)
    for venv in (".venv", ".cache/sglang-parser-venv", ".cache/aiconfigurator-venv"):
        assert (operator.checkout / venv / ".installed").is_file(), venv
        assert not (operator.checkout / venv).is_symlink(), venv
        assert (operator.checkout / venv).stat().st_uid != 0, f"{venv} was built by root"


def test_capacity_prints_production_s_figures(operator: Operator) -> None:
    done = operator.ran["sglang-envelope capacity"]
    assert done.code == 0, shown(done)
    fleet, engines = done.stdout.split("## gpu-node-01 prefill", 1)
    assert "- parallel calls at the full context of 524288 tokens: 21, bound by decode KV pools" in fleet, fleet
    decode = engines.split("## gpu-node-01 decode", 1)[1].split("\n## ", 1)[0]
    assert "total context (KV pool): 11159040 tokens" in decode
    assert "parallel calls (max_running_requests): 64" in decode
    assert "| 524288 | 21 | 21 | kv_pool |" in decode
    assert (operator.checkout / "reports" / "capacity-production" / "capacity.md").is_file()


def test_plan_answers_with_times(operator: Operator) -> None:
    done = operator.ran["sglang-envelope plan"]
    assert done.code == 1, shown(done)  # it does not fit today
    assert "today: 55 at once, bound by decode KV pools" in done.stdout, shown(done)
    assert re.search(r"^time from: AIConfigurator ", done.stdout, re.MULTILINE), shown(done)
    today = re.search(r"^today +8 +no +([0-9,.]+) s +([0-9.]+) ms ", done.stdout, re.MULTILINE)
    assert today and today[1].startswith("986."), shown(done)  # the README's TTFT p90


def test_the_render_runs_the_deep_check(operator: Operator) -> None:
    done = operator.ran["ansible-playbook -i"]
    assert done.code == 0 and "failed=0" in done.stdout, shown(done)
    assert "is skipped" not in done.stdout, shown(done)
    deep = r"deep check: (\d+) command lines checked by SGLang 0.5.23 and smg 1.13.0 \(0 from the cache\)"
    checked = re.search(deep, " ".join(done.stdout.split()))  # the callback wraps the message
    assert checked and int(checked[1]) > 0, shown(done)
    assert (operator.checkout / "reports" / "rendered" / "gpu-node-01").is_dir()
