"""`SimProvider`: a deterministic simulated model with a provider-faithful prompt cache.

Token counts use the chars/4 estimate: a prompt prefix of `n` bytes of canonical JSON (the
request serialized by the real adapter's body builder) costs `ceil(n / 4)` tokens; an answer
of `n` characters costs `ceil(n / 4)` output tokens.

Cache rules, per mode (the cache belongs to the provider instance and is shared by every
session, like an organisation-level provider cache; entries expire on trio's clock):

* `anthropic` — the body comes from `anthropic_body`, so breakpoints sit where
  `AnthropicProvider` puts them. Blocks (each tool, system block and message content block)
  are hashed in cache order (tools, system, messages). A read is the longest cached block
  boundary found at a breakpoint or up to 20 blocks before one; every breakpoint after it
  whose prefix reaches the 1024-token minimum is written. `input` is everything after the
  last written breakpoint (or the read). A read refreshes the TTL of every cached prefix
  it covers.
* `openai` — the body comes from `openai_body`; tools then messages are hashed as one byte
  string. A read is the longest cached prefix of 1024 + k·128 tokens; every such prefix of
  the request is stored. OpenAI reports no cache writes.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import trio
from attrs import frozen

from ...codecs.jsonvalue import canonical_json
from ..errors import ErrorCode, ProviderError
from ..log.request import Request
from ..model.chunks import (
    BlockEnd,
    BlockStart,
    Finish,
    StreamChunk,
    TextDelta,
    TokenUsage,
    ToolCallDelta,
    UsageReport,
)
from ..model.messages import ToolResult
from .anthropic import anthropic_body
from .base import ModelInfo
from .chat_body import openai_body

SimMode: TypeAlias = Literal["anthropic", "openai"]
ToolPolicy: TypeAlias = Callable[[Request], Sequence[tuple[str, Mapping[str, Any]]]]
Output: TypeAlias = str | Callable[[Request], str] | None

MIN_CACHE_TOKENS = 1024
OPENAI_BLOCK_TOKENS = 128
ANTHROPIC_LOOKBACK_BLOCKS = 20
DEFAULT_TTL = 300.0
DEFAULT_CONTEXT_WINDOW = 200_000
TOOL_MARKER = re.compile(r"call:([A-Za-z_][\w.-]*)")

_WORDS = (
    "agent", "answers", "cache", "careful", "history", "log", "model", "prefix",
    "provider", "request", "reuses", "session", "step", "the", "tool", "warm",
)  # fmt: skip
_SWEEP_EVERY = 256


@frozen
class CacheSegment:
    """One cacheable block: its canonical bytes and whether it carries a breakpoint."""

    data: bytes
    breakpoint: bool = False


@frozen
class _Point:
    key: bytes
    tokens: int


@frozen
class CachePlan:
    """What one request reads and will write; writes land when the answer starts."""

    usage: TokenUsage
    total: int
    refresh: tuple[bytes, ...]


def estimate_tokens(size: int) -> int:
    return math.ceil(size / 4)


def _strip_marker(block: Mapping[str, Any]) -> dict[str, Any]:
    # Moving a breakpoint does not change the cached content, so markers are not hashed.
    return {key: value for key, value in block.items() if key != "cache_control"}


def anthropic_segments(body: Mapping[str, Any]) -> list[CacheSegment]:
    """Blocks of a Messages body in cache order: tools, system, message content blocks."""
    segments = [
        CacheSegment(canonical_json(_strip_marker(tool)), "cache_control" in tool)
        for tool in body.get("tools", ())
    ]
    segments += [
        CacheSegment(canonical_json(_strip_marker(block)), "cache_control" in block)
        for block in body.get("system", ())
    ]
    for position, message in enumerate(body["messages"]):
        for block in message["content"]:
            item = {"message": position, "role": message["role"], "block": _strip_marker(block)}
            segments.append(CacheSegment(canonical_json(item), "cache_control" in block))
    return segments


def openai_segments(body: Mapping[str, Any]) -> list[CacheSegment]:
    """Tools, then messages, each as canonical bytes (no breakpoints: caching is automatic)."""
    return [CacheSegment(canonical_json(tool)) for tool in body.get("tools", ())] + [
        CacheSegment(canonical_json(message)) for message in body["messages"]
    ]


class PromptCache:
    """Prefix digests with expiry times on trio's clock."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._expiry: dict[bytes, float] = {}

    def __len__(self) -> int:
        return len(self._expiry)

    def live(self, key: bytes, now: float) -> bool:
        expiry = self._expiry.get(key)
        if expiry is None:
            return False
        if expiry <= now:
            del self._expiry[key]
            return False
        return True

    def store(self, key: bytes, now: float) -> None:
        self._expiry[key] = now + self.ttl

    def sweep(self, now: float) -> None:
        self._expiry = {key: at for key, at in self._expiry.items() if at > now}

    def clear(self) -> None:
        self._expiry.clear()


class SimProvider:
    """A deterministic model for demos, load tests and cache benchmarks.

    Answers `output` (a string, a callable of the request, or seeded filler text of
    `output_tokens` tokens). Calls tools when `tool_policy(request)` returns calls, or, by
    default, when the last user message contains `call:TOOLNAME` for an offered tool.
    Honours `max_tokens` (finish `max-tokens`) and stop sequences. `latency` delays the first
    chunk; `tokens_per_second` paces the rest. Usage is reported as the real provider would.
    """

    def __init__(
        self,
        mode: SimMode = "anthropic",
        *,
        latency: float = 0.0,
        output: Output = None,
        output_tokens: int = 24,
        seed: int = 0,
        tool_policy: ToolPolicy | None = None,
        tokens_per_second: float | None = None,
        chunk_chars: int = 16,
        cache_ttl: float = DEFAULT_TTL,
        min_cache_tokens: int = MIN_CACHE_TOKENS,
        context_window: int | None = DEFAULT_CONTEXT_WINDOW,
        name: str = "sim",
    ) -> None:
        if mode not in ("anthropic", "openai"):
            raise ValueError(f"SimProvider mode must be 'anthropic' or 'openai', got {mode!r}")
        self.name = name
        self.mode: SimMode = mode
        self.latency = latency
        self.output = output
        self.output_tokens = output_tokens
        self.seed = seed
        self.tool_policy = tool_policy
        self.tokens_per_second = tokens_per_second
        self.chunk_chars = max(1, chunk_chars)
        self.min_cache_tokens = min_cache_tokens
        self.context_window = context_window
        self.cache = PromptCache(cache_ttl)
        self.requests: list[Request] = []
        self.usages: list[TokenUsage] = []
        self.calls = 0

    def __repr__(self) -> str:
        return f"SimProvider(mode={self.mode!r}, seed={self.seed}, name={self.name!r})"

    def model_info(self, model: str) -> ModelInfo | None:
        """The simulated context window (the same for every model)."""
        return ModelInfo(self.context_window)

    def body(self, request: Request) -> dict[str, Any]:
        """The wire body the matching real adapter would send."""
        if self.mode == "anthropic":
            return anthropic_body(request)
        return openai_body(request)

    def segments(self, request: Request) -> list[CacheSegment]:
        """The cacheable blocks of `request` in cache order, breakpoints marked."""
        body = self.body(request)
        return anthropic_segments(body) if self.mode == "anthropic" else openai_segments(body)

    def prompt_tokens(self, request: Request) -> int:
        """Billed input tokens of `request` (input + cache_read + cache_write)."""
        return estimate_tokens(sum(len(segment.data) for segment in self.segments(request)))

    def _points(self, model: str, segments: Sequence[CacheSegment]) -> list[_Point]:
        hasher = hashlib.sha256(model.encode("utf-8") + b"\x00")
        size = 0
        points = []
        for segment in segments:
            hasher.update(segment.data)
            size += len(segment.data)
            points.append(_Point(hasher.copy().digest(), estimate_tokens(size)))
        return points

    def plan(self, request: Request, now: float) -> CachePlan:
        """Cache accounting for one request at time `now` (reads happen here)."""
        segments = self.segments(request)
        if self.mode == "anthropic":
            return self._plan_anthropic(request.model, segments, now)
        return self._plan_openai(request.model, segments, now)

    def _plan_anthropic(
        self, model: str, segments: Sequence[CacheSegment], now: float
    ) -> CachePlan:
        points = self._points(model, segments)
        total = points[-1].tokens if points else 0
        breakpoints = [i for i, segment in enumerate(segments) if segment.breakpoint]
        hit = -1
        for mark in breakpoints:
            for position in range(mark, max(-1, mark - ANTHROPIC_LOOKBACK_BLOCKS), -1):
                if position <= hit:
                    break
                if self.cache.live(points[position].key, now):
                    hit = position
                    break
        read = points[hit].tokens if hit >= 0 else 0
        writes = [i for i in breakpoints if i > hit and points[i].tokens >= self.min_cache_tokens]
        written = points[writes[-1]].tokens - read if writes else 0
        # A read uses every shorter cached prefix too, so all of them are refreshed.
        used = [i for i in range(hit + 1) if self.cache.live(points[i].key, now)]
        keys = tuple(points[i].key for i in used + writes)
        usage = TokenUsage(input=total - read - written, cache_read=read, cache_write=written)
        return CachePlan(usage, total, keys)

    def _plan_openai(self, model: str, segments: Sequence[CacheSegment], now: float) -> CachePlan:
        data = b"".join(segment.data for segment in segments)
        total = estimate_tokens(len(data))
        hasher = hashlib.sha256(model.encode("utf-8") + b"\x00")
        done = 0
        read = 0
        keys = []
        # Only whole 128-token blocks count, starting at the minimum cacheable length.
        for tokens in range(self.min_cache_tokens, len(data) // 4 + 1, OPENAI_BLOCK_TOKENS):
            hasher.update(data[done : tokens * 4])
            done = tokens * 4
            key = hasher.copy().digest()
            if self.cache.live(key, now):
                read = tokens
            keys.append(key)
        return CachePlan(TokenUsage(input=total - read, cache_read=read), total, tuple(keys))

    def _commit(self, plan: CachePlan, now: float) -> None:
        for key in plan.refresh:
            self.cache.store(key, now)
        if self.calls % _SWEEP_EVERY == 0:
            self.cache.sweep(now)

    def _digest(self, request: Request) -> str:
        return hashlib.sha256(canonical_json(self.body(request))).hexdigest()

    def _tool_calls(self, request: Request) -> Sequence[tuple[str, Mapping[str, Any]]]:
        if self.tool_policy is not None:
            return self.tool_policy(request)
        if not request.history or request.history[-1].role != "user":
            return ()
        last = request.history[-1]
        if any(isinstance(block, ToolResult) for block in last.content):
            return ()
        offered = {tool.name for tool in request.tools}
        names = dict.fromkeys(name for name in TOOL_MARKER.findall(last.text) if name in offered)
        return [(name, {}) for name in names]

    def _text(self, request: Request, digest: str) -> str:
        if isinstance(self.output, str):
            return self.output
        if self.output is not None:
            return self.output(request)
        rng = random.Random(f"{self.seed}:{digest}")
        words: list[str] = []
        while estimate_tokens(len(" ".join(words))) < self.output_tokens:
            words.append(rng.choice(_WORDS))
        return " ".join(words)

    def _answer(self, request: Request) -> tuple[list[StreamChunk], Finish, int]:
        """Content chunks, the finish, and the output token count of the answer."""
        digest = self._digest(request)
        calls = self._tool_calls(request)
        if calls:
            prefix = "toolu_sim_" if self.mode == "anthropic" else "call_sim_"
            chunks: list[StreamChunk] = []
            produced = 0
            for index, (name, args) in enumerate(calls):
                call_hash = hashlib.sha256(f"{self.seed}:{digest}:{index}".encode()).hexdigest()
                arguments = canonical_json(dict(args)).decode()
                half = len(arguments) // 2
                chunks += [
                    BlockStart(index, "tool_call", call_id=prefix + call_hash[:16], name=name),
                    ToolCallDelta(index, arguments[:half]),
                    ToolCallDelta(index, arguments[half:]),
                    BlockEnd(index),
                ]
                produced += estimate_tokens(len(name) + len(arguments))
            return chunks, Finish("tool-calls"), produced
        text = self._text(request, digest)
        finish = Finish("stop")
        for stop in request.config.stop or ():
            cut = text.find(stop)
            if cut >= 0:
                text = text[:cut]
        limit = request.config.max_tokens
        if limit is not None and estimate_tokens(len(text)) > limit:
            text = text[: limit * 4]
            finish = Finish("max-tokens")
        pieces = [text[i : i + self.chunk_chars] for i in range(0, len(text), self.chunk_chars)]
        chunks = [BlockStart(0, "text"), *(TextDelta(0, piece) for piece in pieces), BlockEnd(0)]
        return chunks, finish, estimate_tokens(len(text))

    async def stream(self, request: Request) -> AsyncIterator[StreamChunk]:
        """Answer `request` (text, or tool calls per the policy) with cache-faithful usage."""
        self.requests.append(request)
        self.calls += 1
        plan = self.plan(request, trio.current_time())
        if self.context_window is not None and plan.total > self.context_window:
            raise ProviderError(
                f"{self.name}: prompt is too long: {plan.total} tokens > "
                f"{self.context_window} maximum",
                ErrorCode.CONTEXT_WINDOW_EXCEEDED,
            )
        chunks, finish, produced = self._answer(request)
        if self.latency:
            await trio.sleep(self.latency)
        else:
            await trio.lowlevel.checkpoint()
        # Like the real services, a new cache entry becomes readable once the answer starts.
        self._commit(plan, trio.current_time())
        usage = TokenUsage(
            input=plan.usage.input,
            output=produced,
            cache_read=plan.usage.cache_read,
            cache_write=plan.usage.cache_write,
        )
        self.usages.append(usage)
        for chunk in chunks:
            if self.tokens_per_second and isinstance(chunk, TextDelta):
                await trio.sleep(estimate_tokens(len(chunk.text)) / self.tokens_per_second)
            elif self.tokens_per_second and isinstance(chunk, ToolCallDelta):
                await trio.sleep(estimate_tokens(len(chunk.arguments)) / self.tokens_per_second)
            else:
                await trio.lowlevel.checkpoint()
            yield chunk
        yield UsageReport(usage)
        yield finish
