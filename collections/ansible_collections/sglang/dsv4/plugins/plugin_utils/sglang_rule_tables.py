"""All validation rule tables, and docs/rules.md written from them (one table per scope: id, reads, rule, fix), with
the near-limit alerts (sglang_alerts.NEAR_LIMITS) after them."""

from __future__ import annotations

from .sglang_access import ACCESS_RULES
from .sglang_alerts import NEAR_LIMITS, Policy
from .sglang_component_rules import COMPONENT_RULES
from .sglang_engine_rules import ENGINE_RULES
from .sglang_fleet_rules import FLEET_RULES
from .sglang_host_rules import HOST_RULES
from .sglang_pairs import PAIR_RULES, TIMING_RULES
from .sglang_router_rules import ROUTER_RULES
from .sglang_rules import WARNING, Rule
from .sglang_sidedoors import SIDEDOOR_RULES
from .sglang_stack_rules import STACK_RULES

RULES: tuple[Rule, ...] = (
    *HOST_RULES,
    *FLEET_RULES,
    *ENGINE_RULES,
    *ROUTER_RULES,
    *PAIR_RULES,
    *TIMING_RULES,
    *SIDEDOOR_RULES,
    *STACK_RULES,
    *COMPONENT_RULES,
    *ACCESS_RULES,
)
SCOPES = {
    "host": "An engine host's own variables (host_problems), checked once per engine host.",
    "fleet": "The servers of one host against each other (check_fleet): ports and GPUs, in declaration order.",
    "engine": "One engine envelope on its host (check_engine), per prefill and decode engine.",
    "router": "One router envelope against smg 1.13.0 and the decode fleet (check_router).",
    "pair": "Each prefill and decode engine smg may pair, and each router against the prefills' bootstrap deadline "
    "(sglang_pairs).",
    "sidedoor_env": "Each engine's sglang_engine_extra_env against SGLang 0.5.23's registry of variables and its PD "
    "transfer code (sglang_sidedoors); the rows marked warning are shown, not refused.",
    "sidedoor_args": "Each router's sglang_router_extra_args as smg 1.13.0's parser reads them (sglang_sidedoors).",
    "sidedoor_port": "Each server's ports against its service user, and the ports the router's extra arguments open "
    "(sglang_sidedoors).",
    "sidedoor_address": "Each engine's listen address against the address its peers connect to: the router, and for a "
    "prefill engine the decode engines (sglang_sidedoors).",
    "units": "The unit of each duration setting, in its name or its value, and a value plausible for that unit "
    "(sglang_stack_rules, over the whole inventory).",
    "needs": "What one component needs of another: the front of the routers, the monitoring of the engines "
    "(sglang_stack_rules).",
    "timeout": "Each timeout on a request's path against the longest call the envelope admits: one call of the "
    "served per-call context, predicted by the time model at the band's high end and calibrated to the fleet "
    "(sglang_perf_fleet.longest_call_time, once per fleet); where the time model is not installed, the message says "
    "so and the capacity model's per-call context at sglang_stack_rules.PREFILL_TOKENS_PER_S stands in "
    "(sglang_stack_rules.call_need; runs when units and needs pass).",
    "access": "Who can call the stack without a key: a router or front listening beyond loopback while the routers "
    "hold no API key (sglang_access; smg answers 401 only with --api-key).",
    "front": "The HAProxy front's settings as HAProxy 2.6 reads them (sglang_component_rules; haproxy -c refuses the "
    "rendered file the same way).",
    "vrrp": "The keepalived VRRP address of the front, on the front hosts that declare one, as keepalived 2.2.7 reads "
    "it (sglang_component_rules; keepalived -t).",
    "monitoring": "Prometheus's and Alertmanager's settings and the alert policy, on the monitoring server "
    "(sglang_component_rules; promtool, amtool).",
    "unit": "The directives the inventory declares for a server's systemd unit (sglang_common_unit, "
    "sglang_engine_unit, sglang_router_unit, ...) as systemd 252 parses them (sglang_component_rules; "
    "systemd-analyze verify).",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def rules_markdown() -> str:
    """docs/rules.md: the rules of each scope in the order they run; a stage runs only when the earlier found none."""
    lines = [
        "# Validation and alert rules",
        "",
        "Generated from the rule tables (plugins/plugin_utils/sglang_*_rules.py) by `make rules-doc`; do not edit.",
        "Each problem the validation reports names its rule: `{var}={value}: {rule} [{id}]; fix: {fix}`, with the",
        "numbers of the case. Within a scope the rules run stage by stage, and a stage runs only when the earlier",
        "stages found nothing.",
    ]
    for scope, about in SCOPES.items():
        lines += [
            "",
            f"## {scope}",
            "",
            about,
            "",
            "| id | stage | reads | rule | fix |",
            "| --- | --- | --- | --- | --- |",
        ]
        for r in (r for r in RULES if r.scope == scope):
            reads = ", ".join(k if " " in k else f"`{k}`" for k in r.reads)
            stage = f"{r.stage} ({WARNING})" if r.severity == WARNING else r.stage
            lines.append(f"| `{r.id}` | {stage} | {reads} | {_cell(r.rule)} | {_cell(r.fix)} |")
    return "\n".join(lines + _near_limit_lines()) + "\n"


def _near_limit_lines() -> list[str]:
    """The alerts at a share of a declared limit, each with the gauge, the share and the hold it reads."""
    policy = Policy()
    lines = [
        "",
        "## near-limit alerts",
        "",
        "The alerts that fire when a gauge of a server reaches a share of a declared limit (sglang_alerts.NEAR_LIMITS;",
        "the monitoring role writes them as Prometheus rules, each with a promtool test at the line and below it).",
        "",
        "| alert | severity | guards | gauge | share (default) | for (default) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in NEAR_LIMITS.values():
        gauge = f"`{row.aggregate}({row.figure})`" + (f" / `{row.of_live}`" if row.of_live else "")
        share = f"`sglang_monitoring_{row.share}` ({getattr(policy, row.share)})"
        hold = f"`sglang_monitoring_{row.hold}` ({getattr(policy, row.hold)})"
        lines.append(f"| `{row.alert}` | {row.severity} | `{row.guards}` | {gauge} | {share} | {hold} |")
    return lines
