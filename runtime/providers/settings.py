"""How an HTTP adapter reaches its API: one frozen settings value (endpoint, key, name,
timeouts, retries, context windows, httpx transport) shared by every HTTP adapter."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, NoReturn, TypedDict

import attrs
import httpx
from attrs import field, frozen

from ..errors import ErrorCode, ProviderError
from .retry import RetryPolicy

# Read timeout bounds the gap between two streamed bytes, not the whole answer.
DEFAULT_TIMEOUT = httpx.Timeout(connect=10.0, read=300.0, write=30.0, pool=30.0)


class ApiKey:
    """A secret that never shows in `repr`, `str`, pickles or log lines."""

    __slots__ = ("_value",)

    def __init__(self, value: str, origin: str) -> None:
        # An HTTP header cannot carry these; httpx would echo the value in its error.
        if any(char.isspace() or not char.isprintable() for char in value):
            raise ProviderError(
                f"the API key from {origin} contains whitespace or control characters "
                "(a stray newline?); fix the key",
                ErrorCode.AUTHENTICATION,
            )
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        return text.replace(self._value, "***") if self._value else text

    def __repr__(self) -> str:
        return "ApiKey('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ApiKey) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> NoReturn:
        raise TypeError("ApiKey cannot be pickled")


def _as_key(value: str | ApiKey | None) -> ApiKey | None:
    if value is None or isinstance(value, ApiKey):
        return value
    return ApiKey(value, "api_key=") if value else None


def _as_timeout(value: float | httpx.Timeout) -> httpx.Timeout:
    return value if isinstance(value, httpx.Timeout) else httpx.Timeout(value)


def _as_windows(value: Mapping[str, int] | None) -> Mapping[str, int]:
    return MappingProxyType(dict(value or {}))


@frozen(kw_only=True)
class HttpSettings:
    """Where and how an HTTP adapter sends its requests (none of it is a request option).

    `base_url`, `name` and `key_env` left None take the adapter's defaults; `api_key` None
    reads `key_env` from the environment at the first request. `max_retries` overrides the
    `retry` policy's count. `transport` is handed to the adapter's `httpx.AsyncClient` (for
    example an `httpx.MockTransport` in tests, or a proxy or custom-TLS transport); the
    client closes it when the adapter closes, as httpx clients do. A pooling transport
    holds connections of the trio run that used it, so give each run its own.
    """

    base_url: str | None = None
    api_key: ApiKey | None = field(default=None, converter=_as_key)
    name: str | None = None
    key_env: str | None = None
    timeout: httpx.Timeout = field(default=DEFAULT_TIMEOUT, converter=_as_timeout)
    max_retries: int | None = None
    retry: RetryPolicy = field(factory=RetryPolicy)
    context_windows: Mapping[str, int] = field(factory=dict, converter=_as_windows, eq=False)
    transport: httpx.AsyncBaseTransport | None = None

    @property
    def retry_policy(self) -> RetryPolicy:
        """`retry` with `max_retries` applied."""
        if self.max_retries is None:
            return self.retry
        return attrs.evolve(self.retry, max_retries=self.max_retries)


class HttpOptions(TypedDict, total=False):
    """The adapters' keyword arguments that build an `HttpSettings` (its fields of the same
    names); `base_url` and `api_key` are the adapters' positional arguments."""

    name: str | None
    key_env: str | None
    timeout: float | httpx.Timeout
    max_retries: int | None
    retry: RetryPolicy | None
    context_windows: Mapping[str, int] | None
    transport: httpx.AsyncBaseTransport | None


def http_settings(
    settings: HttpSettings | None,
    base_url: str | None,
    api_key: str | None,
    options: HttpOptions,
) -> HttpSettings:
    """`settings` (default: all defaults) with the keyword arguments given on top; a
    positional `base_url` or `api_key` left None keeps the one in `settings`."""
    unknown = sorted(options.keys() - HttpOptions.__annotations__.keys())
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    changes: dict[str, Any] = {
        key: value for key, value in options.items() if not (key == "retry" and value is None)
    }
    if base_url is not None:
        changes["base_url"] = base_url
    if api_key is not None:
        changes["api_key"] = api_key
    return attrs.evolve(settings if settings is not None else HttpSettings(), **changes)
