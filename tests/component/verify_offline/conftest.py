"""The verify suite's checks on recorded facts and against a stand-in router (no lab, no GPU).

The suite's modules (verify_expect, verify_remote, its GPU and probe checks) are imported from verify/.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "verify"))
