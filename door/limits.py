"""Per-key limits: requests in flight at once, and tokens (prompt + completion) over the last minute.

A request over a limit is refused before it looks at the group, with OpenAI's own shape for it: a 429
``{"error": {"type": "rate_limit_error", "code": "rate_limit_exceeded", ...}}`` and ``Retry-After``
in whole seconds, which the OpenAI SDK retries by itself (its ``max_retries``, 2 by default, honours
``Retry-After`` up to 60 s: openai-python ``_base_client._calculate_retry_timeout``). A request's
tokens are known when it ends, so the minute's count is of finished requests: one long request can
take a key past its limit once, and the next request then waits for the window to move on. A key
with no limits is never counted.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from door.keyset import Limits

WINDOW_S = 60.0
# A refused concurrent request is told to come back this soon: a slot frees at any moment.
CONCURRENT_RETRY_S = 1


class Limiter:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.active: dict[str, int] = {}
        self.used: dict[str, deque[tuple[float, int]]] = {}

    def _window(self, name: str) -> deque[tuple[float, int]]:
        spent = self.used.setdefault(name, deque())
        cutoff = self.clock() - WINDOW_S
        while spent and spent[0][0] <= cutoff:
            spent.popleft()
        return spent

    def admit(self, name: str, limits: Limits) -> tuple[int, str] | None:
        """None when the request may go (and it is counted in flight); else (Retry-After, why)."""
        if not limits.any:
            return None
        if limits.concurrent is not None and self.active.get(name, 0) >= limits.concurrent:
            return CONCURRENT_RETRY_S, f"{limits.concurrent} request(s) at once"
        if limits.tokens_per_minute is not None:
            spent = self._window(name)
            total = sum(n for _, n in spent)
            if total >= limits.tokens_per_minute:
                # Wait until enough of the window has moved out to bring the count under the limit.
                for at, n in spent:
                    total -= n
                    if total < limits.tokens_per_minute:
                        wait = at + WINDOW_S - self.clock()
                        return max(1, math.ceil(wait)), f"{limits.tokens_per_minute} tokens per minute"
        self.active[name] = self.active.get(name, 0) + 1
        return None

    def release(self, name: str, limits: Limits, tokens: int) -> None:
        if not limits.any:
            return
        self.active[name] = max(0, self.active.get(name, 0) - 1)
        if tokens > 0:
            self._window(name).append((self.clock(), tokens))
