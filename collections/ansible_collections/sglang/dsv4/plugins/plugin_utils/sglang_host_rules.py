"""The rules of an engine host's own variables (scope `host`): its GPU memory, its GPU count and the model facts
the capacity model needs (sglang_model against models/<name>/config.json)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .sglang_perf import INTERCONNECT, NVLINK, PCIE
from .sglang_perf_calibration import VARIABLE as PERF_MEASURED
from .sglang_perf_calibration import MeasuredPointError, parse_points
from .sglang_rules import Finding, Rule

# At least this many parameters in `params_b` means a count of parameters, not billions.
PARAMS_B_UNITS = 100_000
# sglang_model key and the config.json field that states it (the host rules and sglang_engine_rules.model_facts)
FACTS = (("params_b", "num_parameters_b"), ("quantization", "quantization"))


@dataclass(frozen=True)
class HostContext:
    """One engine host's variables and the model config of the fleet."""

    host: str
    hostvars: Mapping[str, Any]
    model_config: Mapping[str, Any]

    @property
    def model(self) -> Mapping[str, Any]:
        return self.hostvars.get("sglang_model") or {}

    @property
    def where(self) -> str:
        return f"models/{self.model.get('name')}/config.json"

    def params_b_plausible(self) -> bool:
        """params_b unset, or a positive count of billions: only then is it compared with the config."""
        params_b = self.model.get("params_b")
        return params_b is None or 0 < float(params_b) < PARAMS_B_UNITS


def _gpu_memory_positive(c: HostContext) -> Iterator[Finding]:
    gib = c.hostvars.get("sglang_gpu_memory_gib")
    if gib is None or float(gib) <= 0:
        yield Finding(
            f"{c.host}: sglang_gpu_memory_gib", gib, "must be > 0 (GiB of one GPU)", "declare e.g. 141 for an H200"
        )


def _gpu_memory_in_gib(c: HostContext) -> Iterator[Finding]:
    gib = c.hostvars.get("sglang_gpu_memory_gib")
    if gib is not None and float(gib) > 1024:
        yield Finding(
            f"{c.host}: sglang_gpu_memory_gib",
            gib,
            "is the memory of one GPU in GiB, and no GPU has more than 1024 GiB",
            "declare the GiB of one GPU (141 for an H200), not MiB or the host's total",
        )


def _gpus_per_host_positive(c: HostContext) -> Iterator[Finding]:
    per_host = c.hostvars.get("sglang_gpus_per_host")
    if per_host is not None and int(per_host) < 1:
        yield Finding(f"{c.host}: sglang_gpus_per_host", per_host, "must be >= 1", "declare the host's GPU count")


def _params_b_in_billions(c: HostContext) -> Iterator[Finding]:
    params_b = c.model.get("params_b")
    if params_b is not None and float(params_b) >= PARAMS_B_UNITS:
        yield Finding(
            f"{c.host}: sglang_model.params_b",
            params_b,
            "is counted in billions of parameters; this looks like a count of single parameters",
            f"declare params_b: {float(params_b) / 1e9:g} (billions)",
        )


def _params_b_positive(c: HostContext) -> Iterator[Finding]:
    params_b = c.model.get("params_b")
    if params_b is not None and float(params_b) <= 0:
        yield Finding(
            f"{c.host}: sglang_model.params_b", params_b, "must be > 0 (billions)", "declare e.g. 284 (billions)"
        )


def _stated(key: str, field: str, c: HostContext) -> Iterator[Finding]:
    if c.params_b_plausible() and c.model.get(key) is None and c.model_config.get(field) is None:
        yield Finding(
            f"{c.host}: sglang_model.{key}",
            None,
            f"neither sglang_model nor {c.where} ({field}) states it, and the capacity model needs it",
            f"add {field} to {c.where} (preferred) or declare sglang_model.{key}",
        )


def _agrees(key: str, field: str, c: HostContext) -> Iterator[Finding]:
    declared, stated = c.model.get(key), c.model_config.get(field)
    if not c.params_b_plausible() or declared is None or stated is None:
        return
    same = (
        abs(float(declared) - float(stated)) <= 1e-9 * max(1.0, abs(float(stated)))
        if key == "params_b"
        else str(declared) == str(stated)
    )
    if not same:
        yield Finding(
            f"{c.host}: sglang_model.{key}",
            declared,
            f"contradicts {c.where}, which states {field}={stated!r}",
            f"remove sglang_model.{key} (it is then taken from {c.where}) or correct the one that is wrong",
        )


def _params_b_stated(c: HostContext) -> Iterator[Finding]:
    yield from _stated(*FACTS[0], c)


def _params_b_agrees(c: HostContext) -> Iterator[Finding]:
    yield from _agrees(*FACTS[0], c)


def _quantization_stated(c: HostContext) -> Iterator[Finding]:
    yield from _stated(*FACTS[1], c)


def _quantization_agrees(c: HostContext) -> Iterator[Finding]:
    yield from _agrees(*FACTS[1], c)


def _interconnect_known(c: HostContext) -> Iterator[Finding]:
    link = c.hostvars.get(INTERCONNECT)
    if link is not None and link not in (NVLINK, PCIE):
        yield Finding(
            f"{c.host}: {INTERCONNECT}",
            link,
            f"must be {NVLINK} or {PCIE} (the path of the TP all-reduces between this host's GPUs)",
            f"declare {PCIE} for GPUs without NVLink between them, else {NVLINK} (the default)",
        )


def _perf_measured_valid(c: HostContext) -> Iterator[Finding]:
    try:
        parse_points(c.hostvars.get(PERF_MEASURED))
    except MeasuredPointError as exc:
        yield Finding(f"{c.host}: {exc.var}", exc.value, exc.rule, exc.fix)


HOST_RULES: tuple[Rule, ...] = (
    Rule(
        "host.gpu_memory_positive",
        1,
        ("sglang_gpu_memory_gib",),
        "must be > 0 (GiB of one GPU)",
        "declare e.g. 141 for an H200",
        _gpu_memory_positive,
    ),
    Rule(
        "host.gpu_memory_in_gib",
        1,
        ("sglang_gpu_memory_gib",),
        "is the memory of one GPU in GiB, and no GPU has more than 1024 GiB",
        "declare the GiB of one GPU (141 for an H200), not MiB or the host's total",
        _gpu_memory_in_gib,
    ),
    Rule(
        "host.gpus_per_host_positive",
        1,
        ("sglang_gpus_per_host",),
        "must be >= 1",
        "declare the host's GPU count",
        _gpus_per_host_positive,
    ),
    Rule(
        "host.params_b_in_billions",
        1,
        ("sglang_model.params_b",),
        f"is counted in billions of parameters (at least {PARAMS_B_UNITS} looks like a count of single parameters)",
        "declare the count in billions",
        _params_b_in_billions,
    ),
    Rule(
        "host.params_b_positive",
        1,
        ("sglang_model.params_b",),
        "must be > 0 (billions)",
        "declare e.g. 284 (billions)",
        _params_b_positive,
    ),
    Rule(
        "host.params_b_stated",
        1,
        ("sglang_model.params_b", "config.json num_parameters_b"),
        "sglang_model or the model config states the parameter count, which the capacity model needs",
        "add num_parameters_b to the model config (preferred) or declare sglang_model.params_b",
        _params_b_stated,
    ),
    Rule(
        "host.params_b_agrees",
        1,
        ("sglang_model.params_b", "config.json num_parameters_b"),
        "a declared params_b agrees with the model config's num_parameters_b (within 1e-9 relative)",
        "remove sglang_model.params_b (it is then taken from the model config) or correct the one that is wrong",
        _params_b_agrees,
    ),
    Rule(
        "host.quantization_stated",
        1,
        ("sglang_model.quantization", "config.json quantization"),
        "sglang_model or the model config states the quantization, which the capacity model needs",
        "add quantization to the model config (preferred) or declare sglang_model.quantization",
        _quantization_stated,
    ),
    Rule(
        "host.quantization_agrees",
        1,
        ("sglang_model.quantization", "config.json quantization"),
        "a declared quantization agrees with the model config's",
        "remove sglang_model.quantization (it is then taken from the model config) or correct the one that is wrong",
        _quantization_agrees,
    ),
    Rule(
        "host.interconnect_known",
        1,
        (INTERCONNECT,),
        f"is {NVLINK} or {PCIE}",
        f"declare {PCIE} for GPUs without NVLink between them, else {NVLINK} (the default)",
        _interconnect_known,
    ),
    Rule(
        "host.perf_measured_valid",
        1,
        (PERF_MEASURED,),
        "each measured point names a known figure, its unit, a value > 0, the shape it was measured at, its day "
        "(YYYY-MM-DD) and its source",
        "correct the point the message names (docs/time.md lists the figures and their shapes)",
        _perf_measured_valid,
    ),
)
# The rules of model_fact_problems: the model facts against the model config.
MODEL_FACT_RULES = tuple(r.id for r in HOST_RULES if r.id.endswith(("_stated", "_agrees")))
