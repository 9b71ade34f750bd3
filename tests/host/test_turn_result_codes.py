"""Every `error` TurnResult carries a code: the failure's own, `AGENT_FAILED` when the agent
failed under the turn without one (e.g. its store), `INTERNAL_ERROR` for an exception that
has none (a listener's bug); the message still says what happened."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from actorloop.runtime import AgentOptions, Runtime
from actorloop.runtime.errors import AgentClosed, ErrorCode, ProviderError, StoreError
from actorloop.runtime.stores.urls import open_store
from actorloop.runtime.testing import ScriptedProvider, reply

OPTIONS = AgentOptions(model="m")


async def test_a_turn_whose_store_failed_under_it_says_agent_failed(tmp_path: Path) -> None:
    store = open_store(f"sqlite:{tmp_path / 's.db'}")
    provider = ScriptedProvider([reply("one"), reply("two")])
    # the runtime reports the failed store as it closes
    with pytest.raises(StoreError, match="may not be durable"):
        async with Runtime.open(store=store, provider=provider) as rt:
            agent = await rt.spawn(OPTIONS, session_id="s")
            first = await agent.send("hi")
            assert (first.reason, first.code) == ("completed", None)
            await store.close()  # the store fails under the agent: its writes are refused
            failed = await agent.send("again")
            assert agent.status == "failed"
            with pytest.raises(AgentClosed):
                await agent.send("after")
    assert failed.reason == "error"
    assert failed.code == ErrorCode.AGENT_FAILED
    assert "may not be durable" in (failed.message or "")


async def test_an_error_without_a_code_gets_one_and_a_coded_one_keeps_its_own() -> None:
    def overloaded(_request: Any) -> Any:
        raise ProviderError("the model is down", ErrorCode.OVERLOADED)

    async def broken(agent: Any, value: Any) -> Any:
        raise RuntimeError("listener broke")

    provider = ScriptedProvider([overloaded, reply("fine")])
    async with Runtime.open(provider=provider) as rt:
        agent = await rt.spawn(OPTIONS)
        coded = await agent.send("hi")
        assert (coded.reason, coded.code) == ("error", ErrorCode.OVERLOADED)
        unsubscribe = agent.on("agent/pre-step", broken)
        uncoded = await agent.send("again")
        unsubscribe()
        assert (uncoded.reason, uncoded.code) == ("error", ErrorCode.INTERNAL_ERROR)
        assert "listener broke" in (uncoded.message or "")
        assert (await agent.send("and now")).code is None  # the agent lives on
