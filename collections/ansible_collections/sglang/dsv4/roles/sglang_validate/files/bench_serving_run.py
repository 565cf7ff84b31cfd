"""SGLang 0.5.23's own benchmark client (`sglang.benchmark.serving`) on a CPU-only machine; run in the parser venv.

    bench_serving_run.py runs RUNS.json          # [{"title": str, "argv": [bench_serving flags...]}, ...]
    bench_serving_run.py tokenizer DIR VOCAB     # writes the simulator's tokenizer to DIR

`runs`: each run's argv goes to `cli_main()` unchanged, one after the other in this process (SGLang is imported
once); its title is printed first. A run that exits or raises is reported and the next one still runs; the exit
status is 1 when any failed. Nothing here measures or computes: bench_serving writes its own result file.

Streams are read as an SSE client reads them: a line that starts with a colon is a comment and skipped (the SSE
spec's rule, which the OpenAI SDK and other clients follow). smg writes such a comment (`: ping`) every
`sse_keepalive_secs` (15 s) while a call's first token is pending, so that no proxy on the way (a load balancer's
idle timeout, often 60 s) closes a connection that is silent while a long prompt is prefilled; bench_serving 0.5.23
parses every line but `data: [DONE]` as JSON and would count every call whose first token takes over 15 s as
failed. The keep-alive stays: the client is what reads the stream wrongly.

`tokenizer`: a WordLevel tokenizer over VOCAB words `tok<id>` with a whitespace split, as the simulator tokenizes
(sim/sglang_sim/tokenizer.py: one token per whitespace word; generated token <id> is the word `tok<id>`), so the
client's retokenized output counts equal the simulator's. Id 0 is the unknown word, so VOCAB stays the vocab size.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sglang_cpu

UNKNOWN = "<unk>"


def make_tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {UNKNOWN: 0} | {f"tok{i}": i for i in range(1, vocab_size)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNKNOWN))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token=UNKNOWN, model_max_length=1 << 30)
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out))


def skip_sse_comments() -> None:
    """Response lines that start with `:` (SSE comments) never reach bench_serving's stream loops, which read
    `response.content` line by line (aiohttp's StreamReader iteration)."""
    import aiohttp

    lines = aiohttp.StreamReader.__aiter__

    async def without_comments(self: aiohttp.StreamReader) -> AsyncIterator[bytes]:
        async for line in lines(self):
            if not line.startswith(b":"):
                yield line

    aiohttp.StreamReader.__aiter__ = without_comments  # type: ignore[assignment,method-assign]


def run_all(runs: list[dict[str, Any]]) -> int:
    # No network where the benchmark runs: the model name bench_serving looks up on the hub fails at once.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sglang_cpu.install()
    skip_sse_comments()
    datasets = sglang_cpu._StubFinder()  # `datasets`: imported by bench_serving for the MMMU dataset only
    datasets.roots.add("datasets")
    sys.meta_path.insert(0, datasets)
    from sglang.benchmark.serving import cli_main

    failed = 0
    for run in runs:
        print(str(run["title"]), flush=True)
        sys.argv = ["sglang.benchmark.serving", *[str(a) for a in run["argv"]]]
        try:
            cli_main()
        except SystemExit as exc:
            if exc.code not in (None, 0):
                failed += 1
                print(f"bench_serving exited with {exc.code}", flush=True)
        except Exception:  # a run's failure is reported; the next run still runs
            failed += 1
            traceback.print_exc()
        sys.stdout.flush()
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "tokenizer":
        make_tokenizer(Path(argv[1]), int(argv[2]))
        return 0
    if len(argv) == 2 and argv[0] == "runs":
        return run_all(json.loads(Path(argv[1]).read_text()))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
