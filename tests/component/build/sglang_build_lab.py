"""A throw-away fork repository and a runner for the sglang_build role against localhost."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "collections/ansible_collections/sglang/dsv4/roles/sglang_build"
FIXTURE = Path(__file__).resolve().parent / "fixture_fork"
RECAP = re.compile(r"^engine\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)

PLAYBOOK = """\
- name: Build the fork
  hosts: engine
  gather_facts: false
  roles:
    - role: sglang.dsv4.sglang_build
  handlers:
    - name: Record the release change
      ansible.builtin.command:
        argv: [sh, -c, 'readlink "$1" >> "$2"', sh, "{{ sglang_defaults_current_link }}", "{{ marker }}"]
      changed_when: true
      listen: sglang release changed
"""


def ansible_playbook() -> str:
    """The ansible-playbook of this interpreter's venv, else the one on PATH."""
    beside = Path(sys.executable).with_name("ansible-playbook")
    return str(beside) if beside.is_file() else shutil.which("ansible-playbook") or "ansible-playbook"


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


@dataclass
class Run:
    rc: int
    output: str
    changed: int


@dataclass
class BuildLab:
    root: Path
    fork: Path
    shas: list[str]
    marker: Path
    playbook: Path
    inventory: Path
    base_vars: dict[str, object] = field(default_factory=dict)

    @property
    def current(self) -> Path:
        return self.root / "opt/current"

    @property
    def previous(self) -> Path:
        return self.root / "opt/previous"

    @property
    def releases(self) -> list[str]:
        return sorted(p.name for p in (self.root / "opt/releases").iterdir())

    def link(self, path: Path) -> str | None:
        return os.readlink(path) if path.is_symlink() else None

    def switches(self) -> list[str]:
        return self.marker.read_text().splitlines() if self.marker.exists() else []

    def play(self, **overrides: object) -> Run:
        extra = self.root / "vars.json"
        extra.write_text(json.dumps({**self.base_vars, **overrides}))
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
        cmd = [ansible_playbook(), "-i", str(self.inventory), str(self.playbook), "-e", f"@{extra}"]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.root, timeout=600)
        output = proc.stdout + proc.stderr
        recap = RECAP.search(output)
        return Run(proc.returncode, output, int(recap.group(2)) if recap else -1)


def make_fork(path: Path) -> list[str]:
    """Two commits: version 0.0.1, then 0.0.2."""
    shutil.copytree(FIXTURE / "python", path / "python")
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "fork at 0.0.1")
    first = git(path, "rev-parse", "HEAD").strip()
    init = path / "python/sglang/__init__.py"
    init.write_text(init.read_text().replace('"0.0.1"', '"0.0.2"'))
    git(path, "commit", "-q", "-am", "fork at 0.0.2")
    return [first, git(path, "rev-parse", "HEAD").strip()]


def role_default(name: str) -> str:
    """A plain (untemplated) default of the role, e.g. the wheel pin."""
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    return str(defaults[name]).strip()


def pinned_wheel() -> Path:
    """The wheel the role pins, from .cache/wheels (shared with tests/component/fork); downloaded when absent."""
    name = role_default("sglang_build_wheel_url").rsplit("/", 1)[1]
    wheel = REPO / ".cache/wheels" / name
    if not wheel.is_file():
        spec = f"sglang=={name.split('-')[1]}"
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", spec, "-d", str(wheel.parent)]
        subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != role_default("sglang_build_wheel_sha256"):
        raise AssertionError(f"{wheel} has sha256 {digest}, not the role's pin")
    return wheel
