"""The service benchmark's agents: `actorloop serve --app benchmarks.serve_app:setup` runs
them, and the in-process comparison spawns the same. The model answers at once without
building a wire body (the simulator's request encoding would be counted as the loop's)."""

from __future__ import annotations

import os

from actorloop.runtime import AgentOptions
from actorloop.runtime.cli.orchestration import LOOKUP
from actorloop.runtime.providers.scripted import EchoProvider

LATENCY_ENV = "BENCH_SERVE_LATENCY_MS"
"""The model latency of the served agents, in ms (an app's setup takes no arguments)."""


def bench_provider(latency_ms: float) -> EchoProvider:
    """The benchmark's model: "ok" after `latency_ms`."""
    return EchoProvider(latency=latency_ms / 1000, context_window=200_000)


def bench_options() -> AgentOptions:
    """The benchmark's agent: one tool, a short system prompt."""
    return AgentOptions(
        model="echo-1", provider="echo", system="You are a helpful assistant.", tools=(LOOKUP,)
    )


def setup(app_config: object) -> None:
    """The served profile, with the provider `BENCH_SERVE_LATENCY_MS` asks for."""
    from actorloop.runtime.service.profiles import AppConfig

    assert isinstance(app_config, AppConfig)
    app_config.add_provider(bench_provider(float(os.environ.get(LATENCY_ENV, "0"))))
    app_config.add_profile("bench", bench_options(), default=True)
