"""The README's operator quick start, run as written (one command at a time, as a shell reads the block) in the
checkout, without root and without the lab: `make venvs` is left out (the venvs this test needs are those it
names, built before the tests run), every other line runs. capacity answers (0), plan answers that 100 calls of
200k do not fit today (1), the render playbook validates, renders and deep-checks the production inventory (0)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"<!-- quick-start.*?-->\n```bash\n(.*?)```\n<!-- /quick-start -->", text, re.DOTALL)
    assert block, "the README has no quick-start block"
    return [line.split("  #")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_the_quick_start_block_names_the_operator_s_commands_in_order() -> None:
    commands = quick_start()
    assert commands[:2] == ["make venvs", "source .venv/bin/activate"]
    assert [c.split()[0:2] for c in commands[2:]] == [
        ["sglang-envelope", "capacity"],
        ["sglang-envelope", "plan"],
        ["ansible-playbook", "-i"],
    ]


def test_the_quick_start_runs_as_written() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "SGLANG_DSV4_", "VIRTUAL_ENV"))}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    codes = {}
    for command in quick_start()[1:]:
        if command.startswith("source "):
            continue
        done = subprocess.run(
            ["bash", "-c", f"source .venv/bin/activate && {command}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        codes[command.split()[1]] = done.returncode
        print(f"$ {command}  -> {done.returncode}\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
        if command.startswith("sglang-envelope plan"):
            assert "today: 55 at once, bound by decode KV pools" in done.stdout
            assert "time from: AIConfigurator" in done.stdout
        if command.startswith("ansible-playbook"):
            assert "failed=0" in done.stdout and "is skipped" not in done.stdout  # the deep check ran
    assert codes == {"capacity": 0, "plan": 1, "-i": 0}
    assert (REPO / "reports" / "capacity-production" / "capacity.md").is_file()
    assert (REPO / "reports" / "rendered" / "gpu-node-01").is_dir()
