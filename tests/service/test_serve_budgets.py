"""Budgets over the service (docs/budgets.md, docs/serve.md): a profile's budget is shared
by a session and its subagents, a spent one ends the turn `budget_exhausted`, and the
dollars `GET /v1/sessions/{id}` and the inspector show are genai-prices applied to the
recorded usage (computed here on its own)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serve_kit import running_server

from actorloop.runtime import AgentOptions
from actorloop.runtime.host.subagents import subagent_tool
from actorloop.runtime.log.prices import format_usd
from actorloop.runtime.model.budget import Budget
from actorloop.runtime.model.chunks import StreamChunk, TokenUsage, UsageReport
from actorloop.runtime.service.errors import ServeConfigError
from actorloop.runtime.service.profiles import AppConfig, add_toml_profiles
from actorloop.runtime.testing import ScriptedProvider, reply, tool_call

genai_prices = pytest.importorskip("genai_prices")

MODEL = "gpt-4o-mini"
USAGE = TokenUsage(input=1200, output=80, cache_read=400, cache_write=0)


def usd_of(usage: TokenUsage) -> float:
    """genai-prices on its own, on the recorded buckets."""
    total = usage.input + usage.cache_read + usage.cache_write
    return float(
        genai_prices.calc_price(
            genai_prices.Usage(
                input_tokens=total,
                cache_read_tokens=usage.cache_read,
                cache_write_tokens=usage.cache_write,
                output_tokens=usage.output,
            ),
            MODEL,
            provider_id="openai",
        ).total_price
    )


def priced(chunks: tuple[StreamChunk, ...]) -> tuple[StreamChunk, ...]:
    return tuple(UsageReport(USAGE) if isinstance(c, UsageReport) else c for c in chunks)


def app_config(provider: ScriptedProvider) -> AppConfig:
    config = AppConfig(provider=provider, model=None, store_url="memory:")
    child = AgentOptions(model=MODEL)

    def options(runtime: Any) -> AgentOptions:
        return AgentOptions(
            model=MODEL,
            tools=(subagent_tool(runtime, options=child, keep_child=True),),
            budget=Budget(model_calls=3),
        )

    config.add_profile("priced", options)
    return config


async def test_dollars_per_session_and_subtree_match_genai_prices() -> None:
    provider = ScriptedProvider(
        [
            priced(tool_call("d1", "delegate", {"task": "look it up"})),
            priced(reply("child answer")),
            priced(reply("done")),
        ]
    )
    async with running_server(app_config(provider)) as server, server.client() as client:
        created = await client.post("/v1/sessions", json={"session_id": "s", "profile": "priced"})
        assert created.status_code == 201, created.text
        sent = await client.post("/v1/sessions/s/messages", json={"content": "go"})
        assert sent.json()["reason"] == "completed", sent.text
        detail = (await client.get("/v1/sessions/s")).json()
        one = usd_of(USAGE)
        assert detail["spend"]["model_calls"] == 2
        assert detail["spend"]["usd"] == pytest.approx(2 * one)
        assert detail["subtree_spend"]["model_calls"] == 3
        assert detail["subtree_spend"]["usd"] == pytest.approx(3 * one)
        assert detail["subtree_spend"]["tokens"] == 3 * (1200 + 400 + 80)

        # Three calls spent the profile's budget: the next turn sends nothing.
        again = await client.post("/v1/sessions/s/messages", json={"content": "more"})
        assert again.json()["reason"] == "budget_exhausted", again.text
        assert again.json()["code"] == "BUDGET_EXHAUSTED"
        assert provider.calls == 3

        # The inspector: a cost column in the list, own and subtree cost on the page.
        listing = (await client.get("/")).text
        assert format_usd(2 * one) in listing and format_usd(one) in listing
        page = (await client.get("/sessions/s")).text
        fact = page.split('id="fact-cost"', 1)[1].split("</dd>", 1)[0]
        assert format_usd(2 * one) in fact and format_usd(3 * one) in fact
        by_cost = (await client.get("/", params={"sort": "cost"})).text
        assert by_cost.index('data-session="s.d1"') < by_cost.index('data-session="s"')


def test_a_toml_profile_takes_a_budget(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[profiles.p]\nmodel = "m"\nbudget = { usd = 0.5, model_calls = 20 }\n')
    config = AppConfig(provider=ScriptedProvider(), model=None, store_url="memory:")
    (profile,) = add_toml_profiles(path, config)
    assert profile.build(None).budget == Budget(usd=0.5, model_calls=20)  # type: ignore[arg-type]
    path.write_text('[profiles.p]\nmodel = "m"\nbudget = { tokens = -1 }\n')
    with pytest.raises(ServeConfigError, match="budget"):
        add_toml_profiles(path, AppConfig(provider=ScriptedProvider(), model=None, store_url="m:"))
