"""Transport retry policy for HTTP adapters (tenacity) and the HTTP-status → error-code map.

Only failures before the first streamed byte are retried: a `ProviderError` with
`retryable=True` (429, 408, 5xx, connect/read timeouts, disconnects). Anything after the
first byte surfaces as `STREAM_INTERRUPTED` and is never retried here.
"""

from __future__ import annotations

import email.utils
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import trio
from attrs import field, frozen
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_random_exponential

from ..errors import ErrorCode, ProviderError, TransientProviderError

log = logging.getLogger("actorloop.providers")

T = TypeVar("T")


def status_error(
    provider: str,
    status: int,
    detail: str,
    *,
    code: str | None = None,
    retry_after: float | None = None,
) -> ProviderError:
    """The typed error for a non-2xx answer; `code` (set by the adapter) wins over the status."""
    message = f"{provider}: HTTP {status}: {detail}" if detail else f"{provider}: HTTP {status}"
    if code is None and (status == 429 or status == 408 or status >= 500):
        transient = {
            429: ErrorCode.RATE_LIMITED,
            408: ErrorCode.TIMEOUT,
            529: ErrorCode.OVERLOADED,
        }.get(status, ErrorCode.PROVIDER_ERROR)
        return TransientProviderError(message, transient, status=status, retry_after=retry_after)
    if code is None:
        code = ErrorCode.AUTHENTICATION if status in (401, 403) else ErrorCode.INVALID_REQUEST
    return ProviderError(message, code)


RETRY_AFTER_PREFIXES = ("", "llm_provider-")
"""Where the hint is looked for: the server's own headers first, then a gateway's copy of the
upstream provider's (LiteLLM forwards them as `llm_provider-retry-after` and so on)."""


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from `retry-after-ms`, `retry-after` (seconds or an HTTP date) or their
    `llm_provider-` copies, or None. A value that does not parse is no hint."""
    for prefix in RETRY_AFTER_PREFIXES:
        millis = _number(headers.get(prefix + "retry-after-ms"))
        if millis is not None:
            return millis / 1000.0
        value = headers.get(prefix + "retry-after")
        if value is None:
            continue
        seconds = _number(value)
        if seconds is not None:
            return seconds
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            continue
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return max(0.0, number) if math.isfinite(number) else None


async def _default_sleep(seconds: float) -> None:
    await trio.sleep(seconds)


@frozen
class RetryPolicy:
    """Bounded exponential backoff with full jitter; a server `retry-after` replaces it.

    Every wait is at least `min_delay`, so a jittered draw near zero or a `retry-after`
    date already past never turns into back-to-back retries. `sleep` is injectable so tests
    can record the waits instead of sleeping. A `retry-after` longer than `max_retry_after`
    is not waited for: the error surfaces.
    """

    max_retries: int = 3
    base_delay: float = 0.5
    max_delay: float = 20.0
    max_retry_after: float = 60.0
    min_delay: float = 0.1
    sleep: Callable[[float], Awaitable[None]] = field(default=_default_sleep, repr=False)

    def _should_retry(self, exc: BaseException) -> bool:
        if not isinstance(exc, TransientProviderError):
            return False
        return exc.retry_after is None or exc.retry_after <= self.max_retry_after

    def _wait(self, state: RetryCallState) -> float:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        if isinstance(exc, TransientProviderError) and exc.retry_after is not None:
            return max(self.min_delay, exc.retry_after)
        backoff = wait_random_exponential(multiplier=self.base_delay, max=self.max_delay)
        return max(self.min_delay, float(backoff(state)))

    def _before_sleep(self, state: RetryCallState) -> None:
        outcome = state.outcome
        exc = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        # Adapters build error messages already redacted; nothing else is logged here.
        log.warning(
            "retrying model call (attempt %d of %d) in %.2fs after %s",
            state.attempt_number + 1,
            self.max_retries + 1,
            wait,
            exc,
        )

    async def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `fn(*args)`, retrying transient failures; the last error is re-raised as is."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.max_retries + 1),
            wait=self._wait,
            retry=retry_if_exception(self._should_retry),
            sleep=self.sleep,
            before_sleep=self._before_sleep,
            reraise=True,
        )
        result: T = await retrying(fn, *args)
        return result
