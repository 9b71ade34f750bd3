"""The geometry of the inspector's cache chart: one stacked bar per model request (cache
read, cache write, uncached input), a line for the cached fraction, and a mark where it
dropped — numbers for an SVG, computed from `cache_health` results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from attrs import frozen

from ...log.cache_health import RequestCache

SegmentKind: TypeAlias = Literal["cache-read", "cache-write", "input"]

PLOT_HEIGHT = 220
LEFT_AXIS = 64
RIGHT_AXIS = 48
TOP = 24
BOTTOM = 36
BAR_WIDTH = 22
BAR_GAP = 10


@frozen
class Segment:
    """One bucket of a bar: `kind`, its tokens and its box (y grows downwards)."""

    kind: SegmentKind
    tokens: int
    y: float
    height: float


@frozen
class Bar:
    """The bar of the request at `seq`, its segments bottom-up, the point of its cached
    fraction on the line (None without usage), whether the fraction dropped there, and
    whether that drop was harmless (new input, nothing cached lost)."""

    seq: int
    turn: int
    step: int
    x: float
    segments: tuple[Segment, ...]
    fraction_y: float | None
    dropped: bool
    harmless: bool = False


@frozen
class Tick:
    """A gridline of the token axis."""

    y: float
    tokens: int


@frozen
class CacheChart:
    """The chart: its size, the plot's top and bottom, bars, token ticks and the points of
    the cached-fraction line (SVG `points` syntax, one polyline per run of known values)."""

    width: float
    height: float
    top: float
    bottom: float
    bar_width: float
    bars: tuple[Bar, ...]
    ticks: tuple[Tick, ...]
    fraction_lines: tuple[str, ...]


def nice_step(largest: int, count: int = 4) -> int:
    """A round gridline step (1, 2 or 5 times a power of ten) giving about `count` lines
    up to `largest`."""
    raw = max(1.0, largest / count)
    power = 1
    while power * 10 <= raw:
        power *= 10
    for factor in (1, 2, 5, 10):
        if factor * power >= raw:
            return factor * power
    return 10 * power


def cache_chart(requests: Sequence[RequestCache]) -> CacheChart:
    """The chart of `requests` (in log order)."""
    totals = [r.usage.prompt_total if r.usage is not None else 0 for r in requests]
    step = nice_step(max(totals, default=0))
    top_tokens = max(step, -(-max(totals, default=0) // step) * step)
    bottom = TOP + PLOT_HEIGHT

    def y_of(tokens: float) -> float:
        return bottom - tokens / top_tokens * PLOT_HEIGHT

    bars: list[Bar] = []
    lines: list[str] = []
    run: list[str] = []
    for index, request in enumerate(requests):
        x = LEFT_AXIS + BAR_GAP + index * (BAR_WIDTH + BAR_GAP)
        segments: list[Segment] = []
        base = 0
        usage = request.usage
        if usage is not None:
            buckets: tuple[tuple[SegmentKind, int], ...] = (
                ("cache-read", usage.cache_read),
                ("cache-write", usage.cache_write),
                ("input", usage.input),
            )
            for kind, tokens in buckets:
                if tokens:
                    segments.append(
                        Segment(
                            kind, tokens, y_of(base + tokens), tokens / top_tokens * PLOT_HEIGHT
                        )
                    )
                    base += tokens
        fraction = request.cached_fraction
        fraction_y = None if fraction is None else bottom - fraction * PLOT_HEIGHT
        if fraction_y is None:
            if run:
                lines.append(" ".join(run))
            run = []
        else:
            run.append(f"{x + BAR_WIDTH / 2:g},{fraction_y:g}")
        bars.append(
            Bar(
                request.seq,
                request.turn,
                request.step,
                x,
                tuple(segments),
                fraction_y,
                request.drop is not None,
                request.drop is not None and request.drop.cause == "new-input",
            )
        )
    if run:
        lines.append(" ".join(run))
    ticks = tuple(Tick(y_of(tokens), tokens) for tokens in range(0, top_tokens + 1, step))
    width = LEFT_AXIS + BAR_GAP + len(requests) * (BAR_WIDTH + BAR_GAP) + RIGHT_AXIS
    return CacheChart(
        width=width,
        height=bottom + BOTTOM,
        top=TOP,
        bottom=bottom,
        bar_width=BAR_WIDTH,
        bars=tuple(bars),
        ticks=ticks,
        fraction_lines=tuple(lines),
    )
