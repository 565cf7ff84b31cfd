"""`sglang-envelope capacity --inventory inventories/production`: the capacity table of every engine;
`sglang-envelope plan --inventory inventories/production --want 100x200k`: does a workload shape fit,
and which envelope changes make it fit; `sglang-envelope bench --inventory inventories/lab`: SGLang's bench_serving
against the deployed router, measured beside predicted (bench.py).

Host variables come from `ansible-inventory --list`, so group_vars/host_vars merge exactly as in a deploy.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_capacity import (
    CapacityError,
    bf16_index_loss,
    concurrency_table,
    default_context_lens,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_declared import (
    GROUPS,
    engine_envelope,
    model_config_path,
    router_envelope,
)
from ansible_collections.sglang.dsv4.plugins.module_utils.sglang_schema import ENGINE_ROLES, EnvelopeError, parse_size
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_paths
from ansible_collections.sglang.dsv4.plugins.plugin_utils import sglang_perf_fleet as perf
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_alerts import (
    DASHBOARD_FILE,
    RULES_FILE,
    RULES_TEST_FILE,
    MonitoringError,
    Policy,
    all_alerts,
    fleet,
    policy_vars,
    promtool_tests,
    rule_file,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_chart import render_svg
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_fleet import Engine, ranks_of, router_admission
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf import StepSource
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_calibration import CalibratedSteps
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_perf_live import (
    LiveFiguresMissing,
    live_steps,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_plan import (
    PlanError,
    fleet_from_inventory,
    parse_shape,
    plan,
    render,
)
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_report import fleet_lines, fleet_summary
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_request import check_request
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import declared_state, risks
from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_risks import render as render_risks

from . import bench, calibrate
from .output import ANSWERED, BAD_INPUT, CLOSED_PIPE, DOES_NOT_FIT, INTERRUPTED, OUT, progress, version

REPO = sglang_paths.project_dir()  # SGLANG_DSV4_HOME: reports/ (sglang_paths.py)
MODELS = sglang_paths.models_dir()  # SGLANG_DSV4_MODELS_DIR


class InventoryError(ValueError):
    """An inventory that cannot be read: missing, unparsable, or without an engine host."""


# ansible-inventory fails on a source no plugin parses, instead of warning and answering with localhost only.
_STRICT_INVENTORY = {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true", "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "true"}


def _parser_words(stderr: str) -> str:
    """ansible-inventory's own reason: its errors, and the first plugin's warning that says why."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("[ERROR]")]
    warnings = [line for line in lines if line.startswith("[WARNING]")]
    return "; ".join(warnings[:1] + errors) or (lines[-1] if lines else "no output")


def load_inventory(inventory: str) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """(hostvars, groups) of an inventory, resolved by ansible-inventory; InventoryError (naming the path and the
    parser's words) when it is missing, does not parse, or declares no engine host."""
    exe = Path(sys.executable).with_name("ansible-inventory")
    # The playbook dir is the inventory's own, so no group_vars/ of the current directory leak in.
    inv = Path(inventory).resolve()
    if not inv.exists():
        raise InventoryError(
            f"inventory {inventory}: no such file or directory ({inv}); fix: pass an inventory folder or hosts file, "
            "e.g. -i inventories/production"
        )
    base = inv if inv.is_dir() else inv.parent
    if not exe.exists() and shutil.which("ansible-inventory") is None:
        raise InventoryError(
            f"inventory {inventory}: ansible-inventory is neither beside {sys.executable} nor on PATH; fix: install "
            "this command with its dependencies (pip install, docs/install.md), which include ansible-core"
        )
    cmd = [str(exe) if exe.exists() else "ansible-inventory", "-i", str(inv), "--playbook-dir", str(base), "--list"]
    with progress(f"reading the inventory {inventory} (ansible-inventory)"):
        done = subprocess.run(
            cmd, capture_output=True, text=True, cwd=REPO, env={**os.environ, **_STRICT_INVENTORY}, check=False
        )
    if done.returncode != 0:
        raise InventoryError(f"inventory {inventory}: ansible-inventory cannot parse it: {_parser_words(done.stderr)}")
    data = json.loads(done.stdout)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    groups: dict[str, list[str]] = {}

    def hosts_of(group: str) -> list[str]:
        entry = data.get(group, {})
        found = list(entry.get("hosts", []))
        for child in entry.get("children", []):
            found += hosts_of(child)
        return found

    for name in data:
        if name != "_meta":
            groups[name] = sorted(set(hosts_of(name)))
    if not any(groups.get(GROUPS[role]) for role in ENGINE_ROLES):
        wanted = " or ".join(GROUPS[role] for role in ENGINE_ROLES)
        raise InventoryError(
            f"inventory {inventory}: no host in {wanted} (groups found: {', '.join(sorted(groups)) or 'none'}); "
            f"fix: declare the engine hosts in those groups"
        )
    return hostvars, groups


def model_config_for(hostvars: Mapping[str, Any]) -> dict[str, Any]:
    name = (hostvars.get("sglang_model") or {}).get("name")
    path = Path(model_config_path(MODELS, name))
    if not path.is_file():
        raise EnvelopeError(f"sglang_model.name={name!r}: no {path}; fix: add the model's config.json there")
    return dict(json.loads(path.read_text()))


def engine_capacities(
    hostvars: Mapping[str, Mapping[str, Any]], groups: Mapping[str, list[str]]
) -> list[dict[str, Any]]:
    """One entry per engine: its limits, the concurrency table and the bf16 index-key loss."""
    router_cap = router_admission([router_envelope(hostvars[h]) for h in groups.get(GROUPS["router"], [])])
    out = []
    for role in ENGINE_ROLES:
        for host in groups.get(GROUPS[role], []):
            hv = hostvars[host]
            env = engine_envelope(role, hv)
            model = hv.get("sglang_model") or {}
            kwargs = {"params_b": model.get("params_b"), "quantization": model.get("quantization")}
            live, fp8, loss = bf16_index_loss(model_config_for(hv), env, float(hv["sglang_gpu_memory_gib"]), **kwargs)
            if not env.get("bf16_index_k"):
                live = fp8
            declared_ctx = live.context_len
            ranks = ranks_of(live.resolved)
            rows = concurrency_table(live, default_context_lens(declared_ctx), router_cap, fp8, ranks)
            out.append(
                {
                    "host": host,
                    "role": role,
                    "limits": live,
                    "rows": rows,
                    "bf16_loss": loss,
                    "bf16_index_k": bool(env.get("bf16_index_k")),
                    "router_cap": router_cap,
                    "ranks": ranks,
                }
            )
    return out


def format_table(entry: Mapping[str, Any]) -> str:
    """One engine's limits and concurrency table; the capacity model's limits are one rank's, the lines the whole
    engine's."""
    lim, ranks = entry["limits"], int(entry.get("ranks") or 1)
    lines = [
        f"## {entry['host']} {entry['role']}",
        "",
        f"- per-call context: {lim.context_len} tokens (max_req_input_len {lim.max_req_input_len})",
        f"- total context (KV pool): {lim.max_total_num_tokens * ranks} tokens"
        + (f" ({ranks} attention-DP ranks of {lim.max_total_num_tokens})" if ranks > 1 else "")
        + f", page {lim.page_size}",
        f"- parallel calls (max_running_requests): {lim.max_running_requests * ranks}",
        f"- KV bytes per token per GPU: {lim.bytes_per_token:.1f}; "
        f"request-scoped bytes: {lim.fixed_bytes / 2**30:.2f} GiB; "
        f"weights per GPU: {lim.weights_bytes / 2**30:.1f} GiB",
        f"- bf16 index keys: {'on' if entry['bf16_index_k'] else 'off'}; "
        f"they cost {entry['bf16_loss'] * 100:.1f} % of KV tokens",
        "",
        "| context | fit in KV pool | run at once | binding limit | fit with fp8 index keys | lost to bf16 keys |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    for r in entry["rows"]:
        lines.append(
            f"| {r.context_len} | {r.fit_in_pool} | {r.concurrent} | {r.binding} | {r.fit_fp8_index} | "
            f"{r.lost_to_bf16_index} |"
        )
    return "\n".join(lines) + "\n"


# --no-time: memory only (the time model's answers then say "not predicted").
_TIME = {"on": True}


def time_steps() -> StepSource | None:
    """The time model's step source: AIConfigurator's measured data when its venv is installed (make perf-venv)."""
    return perf.default_steps() if _TIME["on"] else None


def steps_origin(steps: StepSource) -> str:
    """Where the time model's step times come from, in one line: calibrated to this fleet, the live fleet, or
    uncalibrated (perf.time_header)."""
    return perf.time_header(steps)


def risk_section(
    hostvars: Mapping[str, Any],
    groups: Mapping[str, list[str]],
    tokens: int | None = None,
    slo: perf.Slo = perf.DEFAULT_SLO,
    osl: int = perf.DEFAULT_OUTPUT_TOKENS,
    steps: StepSource | None = None,
) -> str:
    """The risks of the declared fleet, with validated fixes (Markdown), and the time risks for calls of `tokens`
    (None: sglang_workload.p90_context_tokens, else perf.TYPICAL_TOKENS) against `slo`, on `steps` (None: the
    default step source, time_steps). Their dicts go into the --json document's `risks`."""
    fleet = fleet_from_inventory(hostvars, groups)
    engines = fleet.hosts("decode") or fleet.hosts("prefill")
    if not engines:
        return ""
    config = model_config_for(hostvars[engines[0]])
    state = declared_state(fleet, config)
    findings = [f.as_dict() for f in risks(state, fleet, config)]
    if fleet.hosts("prefill") and fleet.hosts("decode"):
        length = tokens or int(state.workload.get("p90_context_tokens") or perf.TYPICAL_TOKENS)
        with progress("judging the time risks (the time model)"):
            findings += perf.time_risks(fleet, config, length, slo, steps or time_steps(), osl)
    OUT.put("risks", findings)
    lines = render_risks(findings) or ["none found"]
    return "## Risks (from the declared values)\n\n" + "\n".join(f"    {line}" for line in lines) + "\n"


def fleet_section(
    entries: Sequence[Mapping[str, Any]], hostvars: Mapping[str, Any], groups: Mapping[str, list[str]]
) -> str:
    """The fleet answer of the declared fleet (Markdown): what the audit's report states from the live values
    (sglang_report.fleet_summary), here from the limits of the engines' tables (`entries`, engine_capacities) and
    the routers' declared envelopes. Its dict goes into the --json document's `fleet`."""
    fleet_engines = [Engine.from_limits(e["host"], e["role"], e["limits"]) for e in entries]
    routers = [router_envelope(hostvars[h]) for h in groups.get(GROUPS["router"], [])]
    summary = fleet_summary(fleet_engines, routers)
    OUT.put("fleet", summary)
    return "## Fleet\n\n" + "\n".join(f"- {line}" for line in fleet_lines(summary)) + "\n"


def capacity_command(inventory: str, out_dir: str | None) -> int:
    try:
        hostvars, groups = load_inventory(inventory)
        entries = engine_capacities(hostvars, groups)
        fleet_text = fleet_section(entries, hostvars, groups)
        risk_text = risk_section(hostvars, groups)
    except (EnvelopeError, CapacityError, PlanError) as exc:
        return OUT.error(str(exc))
    target = Path(out_dir or REPO / "reports" / f"capacity-{Path(inventory).name}")
    target.mkdir(parents=True, exist_ok=True)
    report = [f"# Capacity of {inventory}", "", fleet_text]
    OUT.say(fleet_text)
    for entry in entries:
        table = format_table(entry)
        svg_name = f"{entry['host']}-{entry['role']}.svg"
        lim = entry["limits"]
        svg = render_svg(
            entry["rows"],
            lim.context_len,
            lim.max_running_requests,
            entry["router_cap"],
            f"{entry['host']} {entry['role']}: concurrent full-length requests",
        )
        (target / svg_name).write_text(svg)
        report += [table, f"![chart]({svg_name})", ""]
        OUT.say(table)
        OUT.add("engines", {**{k: v for k, v in entry.items() if k != "rows"}, "rows": entry["rows"]})
        OUT.add("files", str(target / svg_name))
    OUT.say(risk_text)
    report.append(risk_text)
    (target / "capacity.md").write_text("\n".join(report))
    OUT.add("files", str(target / "capacity.md"))
    OUT.say(f"table and charts written to {target}")
    return ANSWERED


def parse_slo(ttft_p90: str | None, itl_p90: str | None, tokens_per_s: float | None) -> perf.Slo:
    """The plan command's SLO options: --ttft-p90 60s, --itl-p90 80ms, --tokens-per-s 20."""
    try:
        return perf.Slo(
            perf.parse_duration_ms(ttft_p90, "s") if ttft_p90 else None,
            perf.parse_duration_ms(itl_p90, "ms") if itl_p90 else None,
            tokens_per_s,
        )
    except ValueError as exc:
        raise PlanError(f"SLO: {exc}") from None


def plan_command(
    inventory: str,
    wants: Sequence[str],
    slo: perf.Slo | None = None,
    osl: int = perf.DEFAULT_OUTPUT_TOKENS,
    from_live: str | None = None,
    rate: float | None = None,
) -> int:
    """The plan of each shape, in memory and (when the estimator is installed) in time, then the risks; the time
    risks are judged at the last shape's call length against `slo` (perf.DEFAULT_SLO when none is given).
    `from_live`: the time model's step times from the live fleet as an audit report measured it (its folder or
    audit.json; "": the newest report of this fleet under reports/), shaped by AIConfigurator where installed."""
    try:
        shapes = [parse_shape(w) for w in wants]
        hostvars, groups = load_inventory(inventory)
        fleet = fleet_from_inventory(hostvars, groups)
        first = fleet.hosts("decode")[:1] or fleet.hosts("prefill")[:1]
        if not first:
            raise PlanError(f"{inventory} declares no engine host; fix: add hosts to sglang_decode")
        config = model_config_for(hostvars[first[0]])
        steps = perf.fleet_steps(fleet, config, time_steps())
        if from_live is not None:
            if not _TIME["on"]:
                raise PlanError("--from-live asks for time, --no-time leaves it out: pass one of them")
            engines = sorted(set(fleet.hosts("prefill") + fleet.hosts("decode")))
            steps = live_steps(from_live or None, REPO / "reports", engines, time_steps())
        timed = bool(fleet.hosts("prefill") and fleet.hosts("decode"))
        if slo and steps is None:
            why = "--no-time leaves the time model out" if not _TIME["on"] else perf.NOT_PREDICTED
            raise PlanError(
                f"the SLO ({slo.text()}) needs predicted times, and {why}; fix: run `make perf-venv` and drop "
                "--no-time, or ask without --ttft-p90/--itl-p90/--tokens-per-s"
            )
        if timed and steps is not None:
            OUT.say(f"{steps_origin(steps)}\n")
            OUT.put("time_from", perf.time_source(steps))
            OUT.put("calibrated", isinstance(steps, CalibratedSteps))
        fits = True
        for shape in shapes:
            result = plan(fleet, config, shape)
            if timed:
                with progress(f"predicting the times of {shape.calls}x{shape.tokens} (the time model)"):
                    perf.plan_in_time(result, fleet, config, slo or None, steps, osl, rate)
            OUT.say(render(result, inventory))
            fits = fits and result.fits_today and result.today_meets_slo is not False
            OUT.add("plans", {"fits": result.fits_today and result.today_meets_slo is not False, **plan_dict(result)})
        risk_slo = slo if slo else perf.DEFAULT_SLO
        OUT.say(risk_section(hostvars, groups, shapes[-1].tokens, risk_slo, osl, steps))
    except (PlanError, EnvelopeError, CapacityError, LiveFiguresMissing) as exc:
        return OUT.error(str(exc))
    return ANSWERED if fits else DOES_NOT_FIT


def plan_dict(result: Any) -> dict[str, Any]:
    """A plan as the --json document gives it: its dataclass fields, less each option's whole fleet."""
    options = [{k: v for k, v in vars(o).items() if k != "fleet"} for o in result.options]
    shorter = [{k: v for k, v in vars(o).items() if k != "fleet"} for o in result.shorter]
    return {**vars(result), "options": options, "shorter": shorter}


def check_request_command(inventory: str, input_tokens: int, max_new_tokens: int, chat: bool) -> int:
    """Print the limit that would reject a request of this shape, with the server's text; exit 0 if admitted."""
    try:
        hostvars, groups = load_inventory(inventory)
        every = engine_capacities(hostvars, groups)
        decode = [e for e in every if e["role"] == "decode"]
        routers = [(h, router_envelope(hostvars[h])) for h in groups.get(GROUPS["router"], [])]
    except (EnvelopeError, CapacityError) as exc:
        return OUT.error(str(exc))
    if not decode:
        return OUT.error(f"inventory {inventory}: no host in {GROUPS['decode']}; fix: declare the decode engines")
    engines = [Engine.from_limits(e["host"], "decode", e["limits"]) for e in decode]
    verdict = check_request(
        # every engine judges the length; among equal limits the decode engine, which generates, is named
        [e["limits"] for e in sorted(every, key=lambda e: e["role"] != "decode")],
        routers or {},  # the front sends a call to any router: each judges it
        input_tokens,
        max_new_tokens,
        chat,
        engines=engines,
        generating=[e["limits"] for e in decode],
    )
    shape = f"{input_tokens} input + {max_new_tokens} new tokens{' (chat)' if chat else ''}"
    OUT.put("request", {"input_tokens": input_tokens, "max_new_tokens": max_new_tokens, "chat": chat})
    OUT.put("verdict", verdict)
    if verdict.limit == "admitted":
        OUT.say(f"{shape}: {verdict.text}")
        fleet = fleet_from_inventory(hostvars, groups)
        if fleet.hosts("prefill"):
            config = model_config_for(hostvars[fleet.hosts("decode")[0]])
            with progress("predicting the request's times (the time model)"):
                times = perf.request_times(fleet, config, input_tokens, max_new_tokens, time_steps())
            OUT.put("times", times)
            for line in times:
                OUT.say(f"  {line}")
        return ANSWERED
    OUT.say(f"{shape}: refused by {verdict.limit} (HTTP {verdict.status}): {verdict.text}")
    return DOES_NOT_FIT if verdict.status >= 400 else ANSWERED


def monitoring_command(inventory: str, out: str) -> int:
    """Write the alert rules of an inventory, their promtool unit tests and the Grafana dashboard."""
    hostvars, groups = load_inventory(inventory)
    try:
        files = monitoring_files(hostvars, groups)
    except (EnvelopeError, MonitoringError) as exc:
        return OUT.error(f"monitoring: {exc}")
    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (target / name).write_text(text)
        OUT.say(str(target / name))
        OUT.add("files", str(target / name))
    return ANSWERED


def monitoring_files(hostvars: Mapping[str, Any], groups: Mapping[str, list[str]]) -> dict[str, str]:
    """{file name: text} of the rules, their tests and the dashboard; the policy comes from the first engine host's
    variables."""
    engines = [h for role in ENGINE_ROLES for h in groups.get(GROUPS[role], [])]
    if not engines:
        raise EnvelopeError("the inventory has no host in sglang_prefill or sglang_decode: nothing to monitor")
    first = hostvars[engines[0]]
    fl = fleet(hostvars, groups, model_config_for(first))
    policy = Policy.from_vars(policy_vars(first))
    groups_ = all_alerts(fl, policy, fronted=bool(groups.get("sglang_frontend")))
    dump = functools.partial(yaml.safe_dump, sort_keys=False, width=1000)
    from ansible_collections.sglang.dsv4.plugins.plugin_utils.sglang_dashboard import (
        build,  # grafana-foundation-sdk: a controller tool, loaded only here
    )

    return {
        RULES_FILE: dump(rule_file(groups_)),
        RULES_TEST_FILE: dump(promtool_tests(groups_, RULES_FILE)),
        DASHBOARD_FILE: json.dumps(build(fl, policy), indent=1) + "\n",
    }


def token_count(text: str) -> int:
    """A token count as SGLang reads ints: 200k = 200,000, 512Ki = 524,288, plain ints as they are."""
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a token count is >= 0")
    return value


INVENTORY_HELP = "the inventory: a folder (e.g. inventories/production) or a hosts file"


def _global_options(parser: argparse.ArgumentParser, on_subcommand: bool) -> None:
    """--no-time and --json, accepted before and after the subcommand (after it, absent leaves the value before)."""
    default: Any = argparse.SUPPRESS if on_subcommand else False
    parser.add_argument(
        "--no-time",
        action="store_true",
        default=default,
        help="memory only: leave out the time model (TTFT/ITL predictions)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default,
        help="print one JSON document (docs/cli.md, schema sglang-envelope/1) on stdout instead of the text",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-envelope",
        description="The limits of an SGLang DeepSeek-V4 PD fleet from its inventory. Exit codes: 0 answered and "
        "fits, 1 answered and does not fit (or refused), 2 bad input or a missing prerequisite.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    _global_options(parser, on_subcommand=False)
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=text, description=text)
        cmd.add_argument("--inventory", "-i", required=True, help=INVENTORY_HELP)
        _global_options(cmd, on_subcommand=True)
        return cmd

    cap = command("capacity", "capacity table and chart of every engine host of an inventory")
    cap.add_argument("--out", help="directory for capacity.md and the SVG charts (default reports/capacity-<name>/)")
    want = command("plan", "does a workload shape fit the inventory, and what makes it fit")
    want.add_argument(
        "--want", action="append", required=True, metavar="CALLSxTOKENS", help="e.g. 100x200k; repeat for more"
    )
    want.add_argument("--ttft-p90", metavar="DURATION", help="SLO: time to first token, p90 (e.g. 60s)")
    want.add_argument("--itl-p90", metavar="DURATION", help="SLO: inter-token latency, p90 (e.g. 80ms)")
    want.add_argument("--tokens-per-s", type=float, metavar="N", help="SLO: output tokens/s per call (at ITL p50)")
    bench.add_output_tokens(want, "its CALLSxTOKENS length", token_count)
    want.add_argument(
        "--from-live",
        nargs="?",
        const="",
        metavar="REPORT",
        help="time from the live fleet: the step times the audit measured (an audit report folder or its audit.json; "
        "default the newest reports/audit-*/ of this inventory's engines) instead of AIConfigurator's",
    )
    want.add_argument(
        "--rate",
        type=float,
        metavar="CALLS_PER_S",
        help="the time model's arrivals: Poisson at this rate (calls/s) instead of all the calls at once",
    )
    mon = command("monitoring", "Prometheus alert rules and their promtool tests from the envelope")
    mon.add_argument("--out", required=True, help="directory for the rules, their promtool tests and the dashboard")
    req = command("check-request", "which limit would reject a request of this shape, with its text")
    req.add_argument(
        "--input-tokens", type=token_count, required=True, metavar="N", help="prompt tokens (e.g. 600k, 512Ki)"
    )
    req.add_argument(
        "--max-new-tokens", type=token_count, required=True, metavar="N", help="the request's max_new_tokens (e.g. 8k)"
    )
    req.add_argument("--chat", action="store_true", help="a chat request (the template adds tokens)")
    bench_cmd = command("bench", "benchmark the deployed fleet with SGLang's bench_serving, measured beside predicted")
    bench.add_options(bench_cmd, token_count)
    calibrate.add_options(command("calibrate", calibrate.HELP))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _TIME["on"] = not args.no_time
    OUT.start(args.command, args.json)
    code = BAD_INPUT
    try:
        try:
            code = _run(args)
        except InventoryError as exc:
            code = OUT.error(str(exc))
        if OUT.json:
            print(OUT.document(code), flush=True)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader closed stdout (`| head`): end quietly, and keep the interpreter's last flush from failing too.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return CLOSED_PIPE
    except KeyboardInterrupt:
        return INTERRUPTED  # Ctrl-C: the shell's code for SIGINT, without a traceback
    finally:
        _TIME["on"] = True  # --no-time holds for this command only
        OUT.start("", False)
    return code


def _shapes_longer_than_output(args: argparse.Namespace) -> str | None:
    """--output-tokens given and not shorter than a --want call: the call cannot hold it (an error, not a clamp)."""
    if getattr(args, "output_tokens", None) is None:
        return None
    for text in args.want or []:
        shape = parse_shape(text)
        if args.output_tokens >= shape.tokens:
            return (
                f"--output-tokens {args.output_tokens} is not below the call's {shape.tokens} tokens (--want {text}): "
                "the output tokens are part of the call; fix: a smaller --output-tokens or a longer call"
            )
    return None


def _run(args: argparse.Namespace) -> int:
    if args.command in ("plan", "bench"):
        try:
            why = _shapes_longer_than_output(args)
        except PlanError as exc:
            return OUT.error(str(exc))
        if why:
            return OUT.error(why)
        if args.output_tokens is None:
            args.output_tokens = perf.DEFAULT_OUTPUT_TOKENS
    if args.command == "plan":
        try:
            slo = parse_slo(args.ttft_p90, args.itl_p90, args.tokens_per_s)
        except PlanError as exc:
            return OUT.error(str(exc))
        return plan_command(args.inventory, args.want, slo, args.output_tokens, args.from_live, args.rate)
    if args.command == "monitoring":
        return monitoring_command(args.inventory, args.out)
    if args.command == "check-request":
        return check_request_command(args.inventory, args.input_tokens, args.max_new_tokens, args.chat)
    if args.command == "calibrate":
        try:
            return calibrate.calibrate_command(
                args.inventory,
                load_inventory,
                model_config_for,
                time_steps(),
                REPO / "reports",
                args.from_live,
                args.write,
            )
        except (PlanError, EnvelopeError, CapacityError, LiveFiguresMissing) as exc:
            return OUT.error(str(exc))
    if args.command == "bench":
        return bench.bench_command(args, load_inventory, model_config_for, time_steps())
    return capacity_command(args.inventory, args.out)
