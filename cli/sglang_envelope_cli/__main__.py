"""`python -m sglang_envelope_cli`, the same as the `sglang-envelope` command."""

import sys

from .commands import main

sys.exit(main())
