"""The inspector's HTML: the Jinja2 environment over the packaged templates (autoescaped,
every template compiled when the routes are built, so no request reads a file), the filters
the templates use, and the packaged static assets held in memory."""

from __future__ import annotations

import hashlib
from datetime import datetime
from importlib import resources

import orjson
from attrs import frozen
from jinja2 import Environment, PackageLoader, StrictUndefined, Template, select_autoescape

from ....codecs.converter import encode_event, unstructure
from ...cli.render import (
    ago,
    arguments_text,
    duration,
    iso_utc,
    percent,
    plural,
    timestamp,
    tokens,
)
from ...log.prices import format_usd
from ...model.events import DATA_BY_TYPE, SessionEvent
from ...model.messages import Block, Reasoning, Text, ToolCall
from .cache_notes import harmless, why_uncached
from .listing import KINDS, PER_PAGE, STATUSES

SORT_LABELS = (
    ("tree", "oldest first, forks under their parent"),
    ("id", "session id"),
    ("-created", "newest first"),
    ("-activity", "latest activity first"),
    ("-turns", "most turns first"),
    ("-tokens", "most tokens first"),
    ("-errors", "most errors first"),
    ("-latency", "slowest model calls first"),
)
"""The sorts the sessions list's form offers (every `sort` value works in a link)."""

PACKAGE = "actorloop.runtime.service.inspector"
TEMPLATES = (
    "index.html",
    "session.html",
    "live.html",
    "tree.html",
    "cache.html",
    "request.html",
    "error.html",
)
ASSET_TYPES = {
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


@frozen
class Asset:
    """A static file served from memory, with its content type and an ETag."""

    body: bytes
    media_type: str
    etag: str


def clock(epoch_ms: int) -> str:
    """The local time of day to the second (`14:02:11`), as a timeline labels events."""
    return datetime.fromtimestamp(epoch_ms / 1000).strftime("%H:%M:%S")


def milliseconds(value: int | None) -> str:
    """A duration in milliseconds as text (`3 ms`, `1.2 s`); a dash when unknown."""
    return "—" if value is None else duration(value / 1000)


def pretty_json(value: object) -> str:
    """A value of the data model (or plain JSON) as indented JSON, keys in written order."""
    return orjson.dumps(unstructure(value), option=orjson.OPT_INDENT_2).decode()


def event_json(event: SessionEvent) -> str:
    """An event exactly as the log's codec encodes it, indented."""
    return orjson.dumps(orjson.loads(encode_event(event)), option=orjson.OPT_INDENT_2).decode()


def block_kind(block: Block) -> str:
    """The kind of a content block, as the templates switch on it."""
    if isinstance(block, Text):
        return "text"
    if isinstance(block, Reasoning):
        return "reasoning"
    if isinstance(block, ToolCall):
        return "tool_call"
    return "tool_result"


def environment() -> Environment:
    """The template environment with the inspector's filters."""
    env = Environment(
        loader=PackageLoader(PACKAGE, "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        ago=ago,
        iso=iso_utc,
        timestamp=timestamp,
        tokens=tokens,
        usd=format_usd,
        percent=percent,
        plural=plural,
        ms=milliseconds,
        clock=clock,
        why_uncached=why_uncached,
        pretty_json=pretty_json,
        event_json=event_json,
        block_kind=block_kind,
        arguments=arguments_text,
    )
    env.tests["harmless"] = harmless
    env.globals["event_types"] = " ".join(sorted(DATA_BY_TYPE))
    env.globals.update(statuses=STATUSES, kinds=KINDS, sorts=SORT_LABELS, default_per_page=PER_PAGE)
    return env


def compiled_templates() -> dict[str, Template]:
    """Every page template, compiled."""
    env = environment()
    return {name: env.get_template(name) for name in TEMPLATES}


def packaged_assets() -> dict[str, Asset]:
    """The files under `static/` by name, read once."""
    assets: dict[str, Asset] = {}
    for item in resources.files(PACKAGE).joinpath("static").iterdir():
        suffix = "." + item.name.rpartition(".")[2]
        if item.is_file() and suffix in ASSET_TYPES:
            body = item.read_bytes()
            tag = hashlib.sha256(body).hexdigest()[:16]
            assets[item.name] = Asset(body, ASSET_TYPES[suffix], f'"{tag}"')
    return assets
