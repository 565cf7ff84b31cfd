"""Files the roles deploy: present, with the exact owner, group and mode; secrets not world-readable."""

from __future__ import annotations

from typing import Any

import pytest
from verify_expect import ENGINE_ROLES, SERVER_ROLES, HostPlan, Server


def _check(path: str, want: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    if not seen.get("exists"):
        return [f"{path} ({want['what']}) is missing"]
    problems = []
    if seen.get("type") != ("dir" if want["what"].endswith("directory") else "file"):
        problems.append(f"{path} is a {seen.get('type')}")
    if seen["mode"] != want["mode"]:
        problems.append(f"{path} has mode {seen['mode']:04o}, expected {want['mode']:04o}")
    if (seen["user"], seen["group"]) != (want["user"], want["group"]):
        problems.append(f"{path} is owned by {seen['user']}:{seen['group']}, expected {want['user']}:{want['group']}")
    return problems


def test_shared_paths(plan: HostPlan, snapshot: dict[str, Any]) -> None:
    """Script and environment directories and the local facts file."""
    if not plan.servers:
        pytest.skip(f"{plan.name} serves no SGLang role")
    files = plan.files()
    shared = [p for p, w in files.items() if w["what"] in ("script directory", "environment directory", "local facts")]
    problems = [msg for p in shared for msg in _check(p, files[p], snapshot["stat"][p])]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_server_files(plan: HostPlan, server: Server, snapshot: dict[str, Any]) -> None:
    """Serve script, environment file and unit file of the server."""
    files = plan.files()
    problems = [
        msg
        for p in (server.script, server.env_file, server.unit_file)
        for msg in _check(p, files[p], snapshot["stat"][p])
    ]
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_secrets_not_world_readable(
    plan: HostPlan, server: Server, snapshot: dict[str, Any], observed: dict[str, Any]
) -> None:
    """The environment file holds SGLANG_API_KEY exactly when a key is declared, and others cannot read it."""
    env_stat, dir_stat = snapshot["stat"][server.env_file], snapshot["stat"][plan.env_dir]
    assert env_stat.get("exists"), f"{server.env_file} is missing"
    assert env_stat["mode"] & 0o007 == 0, f"{server.env_file} is world-accessible (mode {env_stat['mode']:04o})"
    assert dir_stat.get("exists") and dir_stat["mode"] & 0o007 == 0, (
        f"{plan.env_dir} is world-accessible (mode {dir_stat.get('mode', 0):04o})"
    )
    env = observed["env_file"]
    assert "error" not in env, env.get("error")
    has_key = env["vars"].get("SGLANG_API_KEY") == "<set>"
    assert has_key == server.api_key, (
        f"{server.env_file}: SGLANG_API_KEY {'set' if has_key else 'absent'}, "
        f"but the inventory {'declares' if server.api_key else 'does not declare'} an API key"
    )


@pytest.mark.parametrize("role", ENGINE_ROLES)
def test_bf16_index_k(server: Server, observed: dict[str, Any]) -> None:
    """SGLANG_DSV4_BF16_INDEX_K=1 in the environment file and the running process exactly when declared."""
    value = observed["env_file"]["vars"].get("SGLANG_DSV4_BF16_INDEX_K")
    assert (value == "1") == server.bf16_index_k, (
        f"{server.env_file}: SGLANG_DSV4_BF16_INDEX_K={value!r}, declared bf16_index_k={server.bf16_index_k}"
    )
    layers = observed.get("layers") or {}
    running = layers.get("running")
    why = layers.get("notes") or layers.get("problems")
    assert running is not None, f"{server.unit}: running layer unknown ({why})"
    assert bool(running.get("bf16_index_k")) == server.bf16_index_k, (
        f"{server.unit}: the process runs with bf16_index_k={running.get('bf16_index_k')}, "
        f"declared {server.bf16_index_k} ({layers.get('running_source')})"
    )


@pytest.mark.parametrize("role", SERVER_ROLES)
def test_unit_wiring(plan: HostPlan, server: Server, observed: dict[str, Any]) -> None:
    """The loaded unit is the deployed file, runs the serve script as the service user, reads the env file."""
    unit = observed["unit"]
    load = unit.get("LoadState")
    assert load == "loaded", f"{server.unit}: LoadState={load} {unit.get('error', '')}"
    assert unit.get("FragmentPath") == server.unit_file, f"{server.unit} is loaded from {unit.get('FragmentPath')}"
    assert f"path={server.script} " in unit.get("ExecStart", "") + " ", (
        f"{server.unit}: ExecStart does not run {server.script}: {unit.get('ExecStart')}"
    )
    assert server.env_file in unit.get("EnvironmentFiles", ""), (
        f"{server.unit}: EnvironmentFiles={unit.get('EnvironmentFiles')!r}, expected {server.env_file}"
    )
    assert (unit.get("User"), unit.get("Group")) == (plan.user, plan.group), (
        f"{server.unit}: User={unit.get('User')} Group={unit.get('Group')}, expected {plan.user}:{plan.group}"
    )


def test_proc_hides_other_users_processes(plan: HostPlan, host: Any) -> None:
    """The API key is on the engines' command lines: /proc shows a process only to its owner, root and the
    monitoring group (hidepid=invisible, gid=), now and after a reboot (/etc/fstab)."""
    if plan.proc_group is None:
        pytest.skip(f"{plan.name} serves no SGLang role or does not manage /proc")
    gid = host.group(plan.proc_group).gid
    options = host.check_output("findmnt --noheadings --output OPTIONS --mountpoint /proc").split(",")
    assert "hidepid=invisible" in options or "hidepid=2" in options, f"/proc is mounted with {options}"
    assert f"gid={gid}" in options, f"/proc exempts no group {plan.proc_group} (gid {gid}): {options}"
    fstab = [line.split() for line in host.file("/etc/fstab").content_string.splitlines()]
    entry = [f for f in fstab if len(f) >= 4 and f[1] == "/proc" and not f[0].startswith("#")]
    assert entry and "hidepid=invisible" in entry[0][3].split(","), f"/etc/fstab /proc entry: {entry}"
