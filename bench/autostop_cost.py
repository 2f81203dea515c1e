"""Print docs/autostop.md's cost table for the default stack config (or the one in argv as JSON).

Usage: python -m bench.autostop_cost ['{"idleStopMinutes": 60}']
"""

from __future__ import annotations

import json
import sys

from infra.config import parse_config
from infra.pricing import autostop_cost_table

if __name__ == "__main__":
    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    cfg = parse_config(
        {f"qwen36-mtp-l4:{k}": json.dumps(v) if not isinstance(v, str) else v for k, v in overrides.items()}
    )
    print(autostop_cost_table(cfg))
