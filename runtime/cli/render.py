"""Human-readable text for the `actorloop` CLI: counts with correct plurals, times, token
amounts, session ids shortened so they stay unique (and expand back to the whole id), and
the timeline of a stored session that `sessions show` prints."""

from __future__ import annotations

import bisect
import time
import unicodedata
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import UTC, datetime

import orjson
from rich.text import Text

from ..log.usage import UsageTotals, cached_fraction
from ..model.budget import BudgetSettle
from ..model.chunks import ErrorInfo
from ..model.events import (
    AssistantMessage,
    CompactionEnd,
    CompactionPrune,
    CompactionSummary,
    ContextMessage,
    IgnorableData,
    PromptBlocked,
    RequestHeaderEvent,
    SessionEvent,
    SteeringMessage,
    ToolCallEvent,
    ToolReconcile,
    ToolResultEvent,
    Trigger,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
)
from ..model.header import EpochHeader, HeaderDelta, LlmCallConfig
from ..model.messages import Content, Message, Reasoning, Source, ToolCall, ToolResult
from ..model.messages import Text as TextBlock
from ..model.meta import SessionMeta

ELLIPSIS = "…"
LABEL_WIDTH = 11
NO_VALUE = "—"
FAILED_MARK = "✗"
FAILED_STYLE = "bold red"
"""How the timeline marks what failed (a compaction), apart from the events around it."""


# ---------------------------------------------------------------------- words and numbers


KEPT_CONTROLS = frozenset("\n\t")
KEPT_FORMATS = frozenset("\u200c\u200d")
"""Format characters kept as they are: the joiners that emoji and scripts are spelled with."""


def visible(value: str) -> str:
    """`value` with every control, format, line-separator and lone-surrogate character
    (ESC, BEL, CR, U+202E, U+2066...) written as its JSON escape (`\\u001b`), as `sessions
    events` prints it, so a stored string cannot clear the screen, link, hide or reorder
    text; newlines, tabs and the zero-width joiners stay. Idempotent."""
    return "".join(
        char
        if not _hidden(char)
        else f"\\u{ord(char):04x}"
        if ord(char) <= 0xFFFF
        else f"\\U{ord(char):08x}"
        for char in value
    )


def _hidden(char: str) -> bool:
    category = unicodedata.category(char)
    if category == "Cc":
        return char not in KEPT_CONTROLS
    if category == "Cf":
        return char not in KEPT_FORMATS
    return category in ("Zl", "Zp", "Cs")


def plural(count: int, singular: str, plural_form: str | None = None) -> str:
    """`1 turn`, `2 turns`, `1,204 events` (`plural_form` for irregular words)."""
    word = singular if count == 1 else plural_form or f"{singular}s"
    return f"{count:,} {word}"


def tokens(count: int) -> str:
    """A token count short enough for a table cell: 950, 9,950, 12.3k, 4.1M."""
    if count < 10_000:
        return f"{count:,}"
    if count < 1_000_000:
        return f"{count / 1000:.1f}k"
    return f"{count / 1_000_000:.1f}M"


def percent(fraction: float | None) -> str:
    """`81%`, or a dash when there is nothing to take a share of."""
    return NO_VALUE if fraction is None else f"{fraction:.0%}"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def ago(epoch_ms: int, now: int | None = None) -> str:
    """How long ago, for a listing: `12 s ago`, `5 min ago`, `3 h ago`, `2 days ago`, then
    the local date."""
    seconds = ((now if now is not None else now_ms()) - epoch_ms) / 1000
    if seconds < 0:
        return timestamp(epoch_ms)
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    days = int(seconds // 86400)
    if days < 7:
        return f"{plural(days, 'day')} ago"
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%Y-%m-%d")


def timestamp(epoch_ms: int) -> str:
    """Local date and time to the second."""
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def iso_utc(epoch_ms: int) -> str:
    """ISO 8601 in UTC with milliseconds (`2025-06-01T12:02:11.250Z`), for JSON output."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def usage_text(usage: UsageTotals) -> str:
    """One line: billed input (with its cached share), output, and the calls behind them."""
    total = usage.total
    if not usage.model_calls and not usage.compaction_calls:
        return "no model calls"
    parts = [f"{plural(total.prompt_total, 'input token')}"]
    if total.prompt_total:
        parts[0] += (
            f" ({percent(usage.cached_fraction)} cached: {total.cache_read:,} read, "
            f"{total.cache_write:,} written)"
        )
    parts.append(plural(total.output, "output token"))
    calls = plural(usage.model_calls, "model call")
    if usage.compaction_calls:
        calls += f" + {plural(usage.compaction_calls, 'summarizer call')}"
    parts.append(calls)
    if usage.unreported:
        parts.append(f"{plural(usage.unreported, 'call')} reported no usage")
    return " · ".join(parts)


# ---------------------------------------------------------------------- session ids


def shorten_ids(shown: Iterable[str], width: int, universe: Collection[str]) -> dict[str, str]:
    """Each id of `shown` cut to at most `width` characters with an ellipsis in the middle,
    so that the cut form still names exactly one id of `universe` (`expand` finds it);
    an id that cannot be cut that short and stay unique is made longer, never ambiguous."""
    ordered = sorted(set(universe) | set(shown))
    return {session_id: _shorten(session_id, width, ordered) for session_id in shown}


def _shorten(session_id: str, width: int, ordered: Sequence[str]) -> str:
    for size in range(max(width, 5), len(session_id)):
        keep = size - 1
        for head in sorted(range(1, keep + 1), key=lambda h: (abs(2 * h - keep), -h)):
            tail = keep - head
            prefix, suffix = session_id[:head], session_id[len(session_id) - tail :]
            if _only_match(prefix, suffix, ordered):
                return f"{prefix}{ELLIPSIS}{suffix}"
    return session_id


def _only_match(prefix: str, suffix: str, ordered: Sequence[str]) -> bool:
    found = 0
    index = bisect.bisect_left(ordered, prefix)
    while index < len(ordered) and ordered[index].startswith(prefix):
        candidate = ordered[index]
        if candidate.endswith(suffix) and len(candidate) >= len(prefix) + len(suffix):
            found += 1
            if found > 1:
                return False
        index += 1
    return found == 1


def expand(given: str, ids: Iterable[str]) -> tuple[str, ...]:
    """The ids `given` may stand for: a shortened id (`head…tail`, or `head...tail`, as
    `sessions list` prints them) or a prefix of an id."""
    text = given.replace("...", ELLIPSIS)
    if ELLIPSIS not in text:
        return tuple(sorted(i for i in ids if i.startswith(text)))
    head, _, tail = text.partition(ELLIPSIS)
    if ELLIPSIS in tail:
        return ()
    return tuple(
        sorted(
            i
            for i in ids
            if i.startswith(head) and i.endswith(tail) and len(i) >= len(head) + len(tail)
        )
    )


# ---------------------------------------------------------------------- the timeline


def _line(label: str, body: str | Text, style: str = "cyan") -> Text:
    """`label` in its column, `body` after it; continuation lines line up under the body."""
    text = Text(f"  {label:<{LABEL_WIDTH - 1}} ", style=style)
    body_text = body if isinstance(body, Text) else Text(visible(body))
    indent = " " * (LABEL_WIDTH + 2)
    for index, part in enumerate(body_text.split("\n", allow_blank=True)):
        if index:
            text.append("\n" + indent)
        text.append_text(part)
    return text


def source_text(source: Source) -> str:
    return "user" if source.kind == "user" else f"plugin {source.plugin}"


def trigger_text(trigger: Trigger) -> str:
    if trigger.kind == "compaction":
        return "compaction"
    return f"{trigger.kind} from {source_text(trigger.source)}"


def reason_text(reason: TurnEndReason) -> str:
    text: str = reason.kind
    if reason.kind == "error":
        detail = ", ".join(part for part in (reason.code, reason.message) if part)
        text += f" ({detail})" if detail else ""
    elif reason.reason:
        text += f" ({reason.reason})"
    elif reason.message:  # max_steps, budget_exhausted: the limit met
        text += f" ({reason.message})"
    return text


def arguments_text(arguments: str) -> str:
    """Tool arguments as compact JSON (the raw string when it is not JSON)."""
    try:
        return orjson.dumps(orjson.loads(arguments or "{}")).decode()
    except orjson.JSONDecodeError:
        return arguments


def content_text(content: Content, names: dict[str, str] | None = None) -> Text:
    """Content blocks as text (made `visible`): text as is, reasoning dimmed, tool calls
    with name, id and arguments, tool results with the call they answer."""
    out = Text()
    for block in content:
        if out:
            out.append("\n")
        if isinstance(block, TextBlock):
            out.append(visible(block.text))
        elif isinstance(block, Reasoning):
            out.append(visible(f"(reasoning) {block.text}"), style="dim")
        elif isinstance(block, ToolCall):
            out.append(visible(f"→ {block.name}"), style="bold")
            out.append(visible(f" [{block.id}] {arguments_text(block.arguments)}"))
        elif isinstance(block, ToolResult):
            name = (names or {}).get(block.tool_call_id, "tool")
            out.append(visible(f"← {name}"), style="bold")
            out.append(visible(f" [{block.tool_call_id}]"))
            out.append(" error" if block.is_error else "", style="red")
            out.append(visible(": " + "".join(part.text for part in block.content)))
    return out


def message_lines(messages: Sequence[Message]) -> Iterator[Text]:
    for message in messages:
        yield _line(message.role, content_text(message.content))


def config_text(config: LlmCallConfig) -> str:
    parts = [f"model {config.model}"]
    if config.provider:
        parts.append(f"provider {config.provider}")
    if config.temperature is not None:
        parts.append(f"temperature {config.temperature:g}")
    if config.max_tokens is not None:
        parts.append(f"max_tokens {config.max_tokens:,}")
    if config.stop:
        parts.append("stop " + ", ".join(repr(stop) for stop in config.stop))
    return ", ".join(parts)


def _system_text(system: str) -> str:
    lines = system.split("\n")
    first = lines[0] if len(lines[0]) <= 72 else lines[0][:71] + ELLIPSIS
    rest = f" (+{plural(len(lines) - 1, 'more line')})" if len(lines) > 1 else ""
    return f'system "{first}"{rest}'


def header_text(header: EpochHeader, reason: str) -> str:
    parts = [f"{reason} snapshot: {config_text(header.config)}"]
    parts.append(_system_text(header.system) if header.system else "no system prompt")
    tools = header.tools or ()
    listed = f": {', '.join(tool.name for tool in tools)}" if tools else ""
    parts.append(plural(len(tools), "tool") + listed)
    parts.append(f"session prefix {plural(len(header.message_prefix or ()), 'message')}")
    return " · ".join(parts)


def delta_text(delta: HeaderDelta) -> str:
    parts: list[str] = []
    if delta.config is not None:
        parts.append(f"config now {config_text(delta.config)}")
    if delta.system is not None:
        patch = delta.system
        parts.append(
            f"system patched (kept {patch.keep_start} + {patch.keep_end} lines, "
            f"{plural(len(patch.insert), 'line')} inserted)"
        )
    if delta.tools is not None:
        changes = [f"+{tool.name}" for tool in delta.tools.added]
        changes += [f"−{name}" for name in delta.tools.removed]
        changes += [f"~{tool.name}" for tool in delta.tools.changed]
        parts.append("tools " + " ".join(changes))
    if delta.message_prefix is not None:
        prefix = delta.message_prefix
        parts.append(
            f"session prefix now {plural(len(prefix), 'message')}"
            if prefix
            else "session prefix now absent"
        )
    return "delta: " + (" · ".join(parts) if parts else "nothing changed")


def _assistant_suffix(data: AssistantMessage) -> str:
    parts = [f"step {data.step}", data.model]
    if data.usage is not None:
        usage = data.usage
        cached = f" ({percent(cached_fraction(usage))} cached)" if usage.prompt_total else ""
        parts.append(f"{usage.prompt_total:,} in{cached}, {usage.output:,} out")
    return " · ".join(parts)


def timeline(meta: SessionMeta, events: Sequence[SessionEvent]) -> Iterator[Text]:
    """The session's log turn by turn: prompts, answers (with usage), tool calls with their
    arguments and results, context, steering, header snapshots and deltas, compaction."""
    names: dict[str, str] = {}
    requested: dict[str, tuple[str, str]] = {}
    started: dict[int, int] = {}
    seed = meta.seed_length or 0
    for index, event in enumerate(events):
        if seed and index == seed:
            yield Text(
                visible(
                    f"── forked from {meta.parent_session} at seq {seed - 1} "
                    f"(events 0–{seed - 1} are the parent's) ──"
                ),
                style="magenta",
            )
        data = event.data
        if isinstance(data, TurnStart):
            started[data.turn] = event.time
            yield Text(visible(f"turn {data.turn} · {trigger_text(data.trigger)}"), style="bold")
        elif isinstance(data, TurnEnd):
            took = (event.time - started.pop(data.turn, event.time)) / 1000
            style = "green" if data.reason.kind == "completed" else "yellow"
            yield Text(
                visible(f"  turn {data.turn} {reason_text(data.reason)} in {duration(took)}"),
                style=style,
            )
        elif isinstance(data, UserMessage):
            yield _line("user", _sourced(data.source, data.content, quiet_for_user=True))
        elif isinstance(data, AssistantMessage):
            for block in data.content:
                if isinstance(block, ToolCall):
                    requested[block.id] = (block.name, block.arguments)
            body = content_text(data.content) or Text("(no content)", style="dim")
            body.append(visible(f"  [{_assistant_suffix(data)}]"), style="dim")
            yield _line("assistant", body)
        elif isinstance(data, ToolCallEvent):
            names[data.call_id] = data.name
            if requested.get(data.call_id) != (data.name, data.arguments):
                yield _line(
                    "tool call",
                    f"{data.name} [{data.call_id}] {arguments_text(data.arguments)} "
                    "(as a hook rewrote it)",
                    "yellow",
                )
        elif isinstance(data, ToolResultEvent):
            yield _line("tool", _tool_result_text(data, names))
        elif isinstance(data, ContextMessage):
            yield _line("context", _sourced(data.source, data.content))
        elif isinstance(data, SteeringMessage):
            yield _line("steering", _sourced(data.source, data.content, quiet_for_user=True))
        elif isinstance(data, PromptBlocked):
            body = Text(visible(f"({data.reason}) "))
            body.append_text(content_text(data.content))
            yield _line("blocked", body, "red")
        elif isinstance(data, RequestHeaderEvent):
            yield _line("header", header_text(data.header, data.reason), "blue")
        elif isinstance(data, HeaderDelta):
            yield _line("header", delta_text(data), "blue")
        elif isinstance(data, (CompactionSummary, CompactionEnd, CompactionPrune)):
            line = _compaction_line(data)
            if line is not None:
                yield line
        elif isinstance(data, ToolReconcile):
            what = "reconciling" if data.action == "reconcile" else "re-running (idempotent)"
            yield _line("tool", visible(f"{what} {data.name} {data.call_id}"), "yellow")
        elif isinstance(data, BudgetSettle):
            # A reservation is noise on every step; a call cut before its answer is not.
            usage = data.usage
            reported = (
                "no usage reported"
                if usage is None
                else f"{usage.prompt_total:,} in, {usage.output:,} out"
            )
            yield _line("budget", f"step {data.step} left no answer; settled: {reported}")
        elif isinstance(data, IgnorableData):
            yield _line("ignored", f"{event.type} (an event type this version does not know)")
    for turn in started:
        yield Text(
            f"  turn {turn} is still open: its writer is live, or it crashed and the next "
            "resume closes it",
            style="yellow",
        )


def _compaction_line(data: CompactionSummary | CompactionEnd | CompactionPrune) -> Text | None:
    """A summary or a prune, or (marked) a failed compaction; nothing for one that ended
    well (its summary was the line)."""
    if isinstance(data, CompactionSummary):
        return _line(
            "compaction",
            f"summarized {plural(len(data.shadowed_seqs), 'event')} "
            f"(~{plural(data.shadowed_token_count, 'token')}) with {data.model}:\n"
            f"{data.summary}",
            "magenta",
        )
    if isinstance(data, CompactionPrune):
        return _line(
            "compaction",
            f"pruned {plural(len(data.shadowed_seqs), 'event')} "
            f"(~{plural(data.shadowed_token_count, 'token')})",
            "magenta",
        )
    if data.error is not None:
        return _line("compaction", _failed_compaction(data.error), FAILED_STYLE)
    return None


def _failed_compaction(error: ErrorInfo) -> str:
    """A failed compaction, marked apart from the summaries: it changed nothing, and the
    turn went on (docs/spec/compaction.md §7.7)."""
    code = f" ({error.code})" if error.code else ""
    return f"{FAILED_MARK} failed{code}: {error.message}; the history stays as it was"


def _sourced(source: Source, content: Content, *, quiet_for_user: bool = False) -> Text:
    """Content with who it came from in front (left out for the user's own prompts)."""
    body = Text()
    if not (quiet_for_user and source.kind == "user"):
        body.append(visible(f"[from {source_text(source)}] "), style="dim")
    body.append_text(content_text(content))
    return body


def _tool_result_text(data: ToolResultEvent, names: dict[str, str]) -> Text:
    body = Text(visible(f"← {names.get(data.call_id, 'tool')}"), style="bold")
    body.append(visible(f" [{data.call_id}]"))
    if data.is_error:
        code = data.error.code if data.error is not None else None
        body.append(f" error{f' {code}' if code else ''}", style="red")
    body.append(visible(": " + "".join(block.text for block in data.content)))
    return body
