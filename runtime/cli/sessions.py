"""`actorloop sessions`: list, show, print the events of, verify, fork and resume stored
sessions. Reading never writes; an empty or blank session id, like any bad input, exits 2
with one line. Only click loads with this module: a command imports what it runs."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import click

from .common import (
    EXIT_VERIFY_FAILED,
    console,
    fail,
    open_checked_store,
    provider_for,
    run_async,
    store_option,
)

if TYPE_CHECKING:
    from ..control.options import Tool
    from ..host.runtime import Runtime
    from ..log.session import Session
    from ..log.summary import SessionSummary
    from ..log.usage import UsageTotals
    from ..model.budget import Spend
    from ..model.header import EpochHeader
    from ..stores.base import Store
    from .listing import Listed
    from .workload import Workload


def _session_id(_ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an empty or blank id (it would match every session as a prefix)."""
    if value is not None and not value.strip():
        name = param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
        fail(f"{name} is empty or blank; give a session id")
    return value


def session_id_argument() -> Any:
    return click.argument("session_id", metavar="SESSION_ID", callback=_session_id)


def sub_store_option() -> Any:
    """`--store` after the subcommand too (`sessions list --store X`); it wins over the one
    before it, which wins over ACTORLOOP_STORE."""
    return click.option(
        "--store",
        "sub_store",
        default=None,
        metavar="URL",
        help="Store URL (wins over one before the subcommand).",
    )


@click.group()
@store_option()
@click.pass_context
def sessions(ctx: click.Context, store_url: str) -> None:
    """List, show, verify, fork and resume stored sessions.

    A SESSION_ID may be given whole, as `sessions list` shortens it (`head…tail`), or as a
    unique prefix. Reading never writes: a session live in another process is read as far
    as it is durable. `--store` may come before or after the subcommand.
    """
    ctx.obj = store_url


async def resolve(store: Store, given: str) -> str:
    """The whole session id `given` stands for (itself, a shortened id or a unique prefix)."""
    from ..errors import InvalidSessionId, SessionIdAmbiguous, SessionNotFound
    from .render import expand

    with contextlib.suppress(InvalidSessionId):
        if await store.exists(given):
            return given
    matches = expand(given, [entry.id for entry in await store.list()])
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SessionNotFound(given)
    raise SessionIdAmbiguous(given, matches)


def _load(store_url: str, session_id: str) -> tuple[str, Session]:
    """The session `session_id` names (its whole id and its durable log, unrepaired)."""
    from ..stores.loading import load_session

    store = open_checked_store(store_url, must_exist=True)

    async def go() -> tuple[str, Session]:
        try:
            whole = await resolve(store, session_id)
            return whole, await load_session(store, whole, repair=False)
        finally:
            await store.close()

    return run_async(go, store_url=store_url)


@sessions.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--ids", "bare_ids", is_flag=True, help="Only the whole ids, one per line.")
@sub_store_option()
@click.pass_obj
def list_sessions(store_url: str, as_json: bool, bare_ids: bool, sub_store: str | None) -> None:
    """One line per stored session: id, kind, status, turns, tokens in/out, cached, created
    (how long ago) and parent.

    On a terminal, long ids are shortened in the middle (`head…tail`) so rows fit; a
    shortened id still names exactly one session, so it can be pasted into any command.
    Piped or redirected, ids are whole and every column is kept.
    """
    from .listing import list_all, print_session_table
    from .shapes import damaged_dict, summary_dict, write_json_lines

    store_url = sub_store or store_url
    store = open_checked_store(store_url, must_exist=True)

    async def go() -> list[Listed]:
        try:
            return await list_all(store)
        finally:
            await store.close()

    listed = run_async(go, store_url=store_url)
    if bare_ids:
        sys.stdout.write("".join(f"{entry.id}\n" for entry in listed))
    elif as_json:
        write_json_lines(
            [
                summary_dict(*entry.summary)
                if entry.summary is not None
                else damaged_dict(entry.id, entry.problem or "")
                for entry in listed
            ]
        )
    elif not listed:
        console().print(f"no sessions in {store_url}", highlight=False)
    else:
        print_session_table(listed, console(), console(stderr=True))


@sessions.command()
@session_id_argument()
@click.option("--derived", is_flag=True, help="Only the conversation the model sees next.")
@click.option("--json", "as_json", is_flag=True, help="The summary and conversation as JSON.")
@sub_store_option()
@click.pass_obj
def show(
    store_url: str, session_id: str, derived: bool, as_json: bool, sub_store: str | None
) -> None:
    """A stored session turn by turn: prompts, answers with their usage, tool calls with
    their arguments and results, context, header snapshots and deltas, compaction (a
    failed one marked as such)."""
    import orjson
    from rich.text import Text

    from ...codecs.converter import unstructure
    from ..log.summary import summarize
    from .render import message_lines, plural, timeline
    from .shapes import spend_dict, summary_dict

    whole, session = _load(sub_store or store_url, session_id)
    meta, events = session.meta, session.events
    summary = summarize(meta, events)
    subtree = _tree_spend(sub_store or store_url, whole)
    header = session.header()
    out = console()
    if as_json:
        shown = {
            "session": summary_dict(meta, summary),
            "subtree_spend": spend_dict(subtree),
            "header": unstructure(header),
            "conversation": unstructure(session.derive_messages()),
        }
        out.print_json(orjson.dumps(shown).decode())
        return
    for line in _summary_lines(summary, subtree):
        out.print(line, highlight=False, soft_wrap=True)
    prefix = (header.message_prefix or ()) if header is not None else ()
    if prefix:
        out.print(Text(f"\nsession prefix: {plural(len(prefix), 'message')}", style="bold"))
        for line in message_lines(prefix):
            out.print(line, highlight=False, soft_wrap=True)
    out.print()
    if derived:
        out.print(
            Text("the conversation the next request is built from (after the prefix):"),
            style="bold",
        )
    lines = message_lines(session.derive_messages()) if derived else timeline(meta, events)
    for line in lines:
        out.print(line, highlight=False, soft_wrap=True)


def _tree_spend(store_url: str, session_id: str) -> Spend:
    """What the stored session and its subagent sessions spent together."""
    from ..stores.spend import tree_spend

    store = open_checked_store(store_url, must_exist=True)

    async def go() -> Spend:
        try:
            return (await tree_spend(store, session_id)).total
        finally:
            await store.close()

    return run_async(go, store_url=store_url)


def _cost_text(own: Spend, subtree: Spend) -> str:
    from ..log.prices import PRICES_NOTE, format_usd, prices_available

    text = f"{format_usd(own.usd)} ({own.model_calls:,} model calls)"
    if subtree != own:
        text += f" · with its subagents {format_usd(subtree.usd)} ({subtree.model_calls:,})"
    if not prices_available():
        text += f" · {PRICES_NOTE}"
    elif own.usd is None or subtree.usd is None:
        text += " · ? = a model genai-prices does not price"
    return text


def _summary_lines(summary: SessionSummary, subtree: Spend) -> list[Any]:
    from rich.text import Text

    from ...codecs.converter import unstructure
    from .render import ago, plural, timestamp, usage_text, visible

    lines = [Text(visible(f"session {summary.id}"), style="bold")]
    if summary.kind == "fork":
        kind = f"fork of {summary.parent} at seq {summary.fork_seq}"
    elif summary.kind == "subagent":
        call = f" (tool call {summary.parent_call})" if summary.parent_call else ""
        kind = f"subagent of {summary.parent}{call}"
    else:
        kind = "root"
    status = f"{summary.status} · {plural(summary.turns, 'turn')} · "
    status += plural(summary.events, "event")
    created = f"{timestamp(summary.created_at)} ({ago(summary.created_at)})"
    if summary.last_event_at is not None:
        created += f" · last event {ago(summary.last_event_at)}"
    labels = {
        key: value
        for key, value in unstructure(summary.labels).items()
        if key not in ("parent_agent", "parent_call")
    }
    fields = [("kind", kind), ("status", status), ("created", created)]
    fields.append(("usage", usage_text(summary.usage)))
    fields.append(("cost", _cost_text(summary.spend, subtree)))
    if labels:
        fields.append(("labels", ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))))
    for name, value in fields:
        line = Text(f"  {name:<9}", style="cyan")
        line.append(visible(value))
        lines.append(line)
    return lines


@sessions.command()
@session_id_argument()
@sub_store_option()
@click.pass_obj
def events(store_url: str, session_id: str, sub_store: str | None) -> None:
    """Every durable event of a session as one JSON object per line."""
    from ...codecs.converter import event_to_dict
    from .shapes import write_json_lines

    _whole, session = _load(sub_store or store_url, session_id)
    write_json_lines([event_to_dict(event) for event in session.events])


@sessions.command()
@session_id_argument()
@click.option("--json", "as_json", is_flag=True, help="The verification report as JSON.")
@sub_store_option()
@click.pass_obj
def verify(store_url: str, session_id: str, as_json: bool, sub_store: str | None) -> None:
    """Rebuild every request from the log and check it against its recorded digest.

    Read-only: a session whose writer is live in another process is verified as far as it
    is durable, and an open last turn is said to be open. A failed check exits 1.
    """
    from ..log.verify import VerificationFailed, verify_log
    from .render import plural
    from .shapes import write_json_lines

    whole, session = _load(sub_store or store_url, session_id)
    try:
        report = verify_log(session.meta, session.events)
    except VerificationFailed as exc:
        fail(f"verification failed: {whole}: {exc}", EXIT_VERIFY_FAILED)
    open_turn = session.open_turn
    if as_json:
        write_json_lines(
            [
                {
                    "ok": True,
                    "id": whole,
                    "events": report.events,
                    "turns": report.turns,
                    "requests_checked": report.requests_checked,
                    "requests_without_digest": report.requests_without_digest,
                    "open_turn": open_turn,
                }
            ]
        )
        return
    line = (
        f"ok: {whole}: {plural(report.events, 'event')}, {plural(report.turns, 'turn')}, "
        f"{plural(report.requests_checked, 'request')} rebuilt and matched "
        f"{'its digest' if report.requests_checked == 1 else 'their digests'}"
    )
    if report.requests_without_digest:
        line += f"; {plural(report.requests_without_digest, 'request')} had no digest to check"
    click.echo(line)
    if open_turn is not None:
        click.echo(
            f"note: turn {open_turn} is still open (its writer is live in another process, or "
            "it crashed and the next resume closes it); the durable part was verified"
        )


@sessions.command()
@session_id_argument()
@click.option("--at", "boundary", type=int, default=None, help="A turn/end seq (default: last).")
@click.option(
    "--child", "child_id", default=None, callback=_session_id, help="The child's session id."
)
@sub_store_option()
@click.pass_obj
def fork(
    store_url: str,
    session_id: str,
    boundary: int | None,
    child_id: str | None,
    sub_store: str | None,
) -> None:
    """Fork a stored session at a turn/end (O(1): the child points at its parent)."""
    from ..stores.loading import fork_point

    store_url = sub_store or store_url
    store = open_checked_store(store_url, must_exist=True)

    async def go() -> tuple[str, int, str]:
        try:
            whole = await resolve(store, session_id)
            point = await fork_point(store, whole, boundary, child_id)
            await store.fork(whole, point.boundary, point.child_id)
        finally:
            await store.close()
        return whole, point.boundary, point.child_id

    whole, at, child = run_async(go, store_url=store_url)
    click.echo(f"forked {whole} at seq {at}: {child}")


@sessions.command()
@session_id_argument()
@click.option("--message", default="Continue.", show_default=True, help="The next user message.")
@click.option("--model", default=None, help="Model to continue with (default: the stored one).")
@click.option("--provider", "provider_spec", default="sim", show_default=True)
@click.option("--base-url", default=None)
@click.option(
    "--workload",
    "workload_name",
    default=None,
    metavar="NAME",
    help="The workload (packaged name or TOML file) the session was run with: its tools and "
    "session prefix are rebuilt for the resumed instance.",
)
@sub_store_option()
@click.pass_obj
def resume(
    store_url: str,
    session_id: str,
    message: str,
    model: str | None,
    provider_spec: str,
    base_url: str | None,
    workload_name: str | None,
    sub_store: str | None,
) -> None:
    """Resume a stored session in a new loop instance and run one turn.

    The stored system prompt and call settings carry over (from the session's last request
    header); `--model` (or a provider spec naming one) replaces only the model. Tools and
    session-prefix listeners are code, not stored: a session `actorloop run` wrote needs
    `--workload NAME` to get them back (else its model loses its tools and the prefix, and
    the provider's cache goes cold). A warning names what the stored header had that this
    resume lacks.
    """
    from ..control.options import AgentOptions
    from ..host.runtime import Runtime
    from ..log.usage import UsageTotals, turn_usage
    from ..stores.loading import load_session
    from .render import usage_text
    from .workload import WorkloadError, find_workload

    store_url = sub_store or store_url
    try:
        spec = None if workload_name is None else find_workload(workload_name)
    except WorkloadError as exc:
        fail(str(exc))
    provider, spec_model = provider_for(provider_spec, base_url, 0.0, None)
    store = open_checked_store(store_url, must_exist=True)

    async def go() -> tuple[str, UsageTotals]:
        try:
            whole = await resolve(store, session_id)
            stored = await load_session(store, whole, repair=False)
        except BaseException:
            await store.close()
            raise
        header = stored.header()
        chosen = model or spec_model
        async with Runtime.open(store=store, provider=provider, dev_invariants=True) as rt:
            role = stored.meta.labels.get("name")
            tools = _resumed_tools(rt, spec, header, role, chosen or "sim-1")
            if header is None:
                options = AgentOptions(model=chosen or "sim-1")
            else:
                # This run's provider serves the session, whatever provider it was stored with.
                overrides = {"model": chosen} if chosen else {}
                options = AgentOptions.restored(header, provider=None, tools=tools, **overrides)
            agent = await rt.resume(whole, options)
            result = await agent.send(message)
            used = turn_usage(agent.session.events, result.turn) if result.turn else UsageTotals()
        return f"turn {result.turn} {result.reason}: {result.text}", used

    line, used = run_async(go, store_url=store_url)
    click.echo(line)
    click.echo(f"usage: {usage_text(used)}")


def _resumed_tools(
    rt: Runtime, spec: Workload | None, header: EpochHeader | None, role: Any, model: str
) -> tuple[Tool, ...]:
    """The tools `spec` (the workload) gives an agent of `role` (for another role, those
    of the stored header's tools it has), its prefix listeners added to `rt`; one warning
    line on stderr for what the stored header had and this resume lacks."""
    from .orchestration import add_workload_listeners, role_tools, workload_tools
    from .render import plural

    stored = [tool.name for tool in (header.tools or ())] if header is not None else []
    tools: tuple[Tool, ...] = ()
    if spec is not None:
        add_workload_listeners(rt, spec)
        offered = workload_tools(rt, spec, model)
        by_role = role_tools(offered, role if isinstance(role, str) else None)
        tools = by_role or tuple(offered[name] for name in stored if name in offered)
    lacking = [name for name in stored if name not in {tool.name for tool in tools}]
    prefix = (header.message_prefix or ()) if header is not None else ()
    lacks: list[str] = []
    if lacking:
        lacks.append(f"tools {', '.join(lacking)}")
    if prefix and (spec is None or not spec.skills):
        lacks.append(f"a session prefix ({plural(len(prefix), 'message')})")
    if lacks:
        hint = "" if spec is not None else "; pass --workload NAME if `actorloop run` wrote it"
        console(stderr=True).print(
            f"actorloop: warning: the stored session had {' and '.join(lacks)} that this "
            f"resume does not offer{hint}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return tools
