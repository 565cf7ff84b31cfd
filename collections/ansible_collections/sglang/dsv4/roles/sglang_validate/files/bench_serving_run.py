"""SGLang 0.5.23's own benchmark client (`sglang.benchmark.serving`) on a CPU-only machine; run in the parser venv.

    bench_serving_run.py runs RUNS.json          # [{"title": str, "argv": [bench_serving flags...]}, ...]
    bench_serving_run.py tokenizer DIR VOCAB     # writes the simulator's tokenizer to DIR

`runs`: each run's argv goes to `cli_main()` unchanged, one after the other in this process (SGLang is imported
once); its title is printed first. A run that exits or raises is reported and the next one still runs; the exit
status is 1 when any failed. Nothing here measures or computes: bench_serving writes its own result file.

`tokenizer`: a WordLevel tokenizer over VOCAB words `tok<id>` with a whitespace split, as the simulator tokenizes
(sim/sglang_sim/tokenizer.py: one token per whitespace word; generated token <id> is the word `tok<id>`), so the
client's retokenized output counts equal the simulator's. Id 0 is the unknown word, so VOCAB stays the vocab size.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
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


def run_all(runs: list[dict[str, Any]]) -> int:
    # No network where the benchmark runs: the model name bench_serving looks up on the hub fails at once.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    sglang_cpu.install()
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
