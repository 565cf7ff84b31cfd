"""The simulator's request histograms against SGLang 0.5.23's own metrics collector (read from the parser venv's
source, observability/metrics_collector.py): the same names, the same default buckets, the same labels."""

from __future__ import annotations

import ast

import pytest
from pool_grid import PARSER_PYTHON
from sglang_sim import metrics

COLLECTOR = PARSER_PYTHON.parents[1] / "lib/python3.11/site-packages/sglang/srt/observability/metrics_collector.py"


@pytest.fixture(scope="module")
def tokenizer_collector() -> ast.FunctionDef:
    if not COLLECTOR.is_file():
        pytest.fail(f"{COLLECTOR} is missing; fix: run `make parser-venv` (make test does it)")
    tree = ast.parse(COLLECTOR.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TokenizerMetricsCollector")
    return next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")


def buckets(init: ast.FunctionDef, name: str) -> tuple[float, ...]:
    """The literal list SGLang assigns to `name` in the collector's __init__ (its default buckets)."""
    for node in ast.walk(init):
        if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]:
            return tuple(float(v) for v in ast.literal_eval(node.value))
    raise AssertionError(f"{name} is not assigned in TokenizerMetricsCollector.__init__")


def histogram_labels(init: ast.FunctionDef, metric: str) -> str:
    """The labelnames expression of SGLang's Histogram named `metric`."""
    for node in ast.walk(init):
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "Histogram":
            kw = {k.arg: k.value for k in node.keywords}
            if isinstance(kw.get("name"), ast.Constant) and kw["name"].value == metric:
                return ast.unparse(kw["labelnames"])
    raise AssertionError(f"SGLang registers no histogram {metric}")


def test_histogram_buckets_are_sglangs(tokenizer_collector: ast.FunctionDef) -> None:
    assert metrics.TTFT_BUCKETS == buckets(tokenizer_collector, "bucket_time_to_first_token")
    assert metrics.E2E_BUCKETS == buckets(tokenizer_collector, "bucket_e2e_request_latency")
    assert metrics.ITL_BUCKETS == buckets(tokenizer_collector, "bucket_inter_token_latency")
    assert metrics.PROMPT_TOKENS_BUCKETS == buckets(tokenizer_collector, "default_bucket_prompt_tokens")


def test_histogram_names_and_labels_are_sglangs(tokenizer_collector: ast.FunctionDef) -> None:
    # TTFT and e2e are split by is_streaming; the inter-token latency carries the collector's labels only
    # (model_name, engine_type), as the simulator's page does (tests/component/sim/test_sim_endpoints.py)
    assert histogram_labels(tokenizer_collector, "sglang:inter_token_latency_seconds") == "labels.keys()"
    assert "is_streaming" in histogram_labels(tokenizer_collector, "sglang:time_to_first_token_seconds")
    assert "is_streaming" in histogram_labels(tokenizer_collector, "sglang:e2e_request_latency_seconds")


def test_several_tokens_at_once_are_observed_as_sglang_does() -> None:
    """observe_inter_token_latency: the interval is split evenly over the new tokens, the sum gets the interval."""
    hist = metrics.Histogram(metrics.ITL_BUCKETS)
    hist.observe_many(0.03, 3)  # three tokens of 10 ms
    hist.observe_many(0.5, 0)  # no new token: nothing
    assert (hist.count, hist.sum) == (3, 0.03)
    assert dict(hist.cumulative())["0.008"] == 0 and dict(hist.cumulative())["0.01"] == 3
