"""An `--app` module for the subprocess tests: `setup(app_config)` registers a profile with
a session-prefix contributor and a prompt filter, over the configured provider."""

from __future__ import annotations

from typing import Any

from actorloop.runtime import AgentOptions, Message
from actorloop.runtime.model.hook_values import Allow, Block, PromptSubmit
from actorloop.runtime.service.profiles import AppConfig


async def opener(agent: Any, value: tuple[Message, ...], next: Any) -> Any:
    return (Message.user("APP OPENER"), *await next())


async def no_shouting(agent: Any, value: PromptSubmit, next: Any) -> Any:
    text = "".join(getattr(block, "text", "") for block in value.content)
    return Block("no shouting") if text.isupper() else Allow()


def setup(app_config: AppConfig) -> None:
    app_config.add_profile(
        "polite",
        AgentOptions(model=app_config.model or "sim-1", system="Be polite."),
        listeners={"agent/session-prefix": opener, "prompt/submit": no_shouting},
        description="a profile from --app",
    )


def setup_nothing(app_config: AppConfig) -> None:
    """Registers no profile: `serve` refuses to start."""
