"""Makes the reliability helpers (``adversarial``, the live-server helpers) importable."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "integration" / "server"))
