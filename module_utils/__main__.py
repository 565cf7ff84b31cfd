"""Entry point of `python -m sglang_envelope`."""

import sys

from .sglang_cli import main

sys.exit(main())
