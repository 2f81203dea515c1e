"""Defaults of bench, load and tune, kept free of heavy imports so ``--help`` stays fast."""

from __future__ import annotations

# bench: what the original measurement used.
DEFAULT_MAX_TOKENS = 256
DEFAULT_REPS = 2
DEFAULT_REQUEST_TIMEOUT_S = 300.0

# load
DEFAULT_CLIENTS = 4
DEFAULT_LOAD_MAX_TOKENS = 128

# tune: the original's sweeps (n-max 2 and p-min 0 won), slot counts, and context resolution.
DEFAULT_N_MAX = (0, 1, 2, 3)
DEFAULT_P_MIN = (0.0, 0.5, 0.8)
DEFAULT_PARALLEL = (1, 2, 4)
DEFAULT_CTX_MIN = 8192
DEFAULT_CTX_MAX = 65536
DEFAULT_CTX_RESOLUTION = 1024
DEFAULT_TUNE_REPS = 1
# How often `load --group` counts the fleet's servers through the Compute API.
DEFAULT_SERVERS_POLL_S = 15.0
