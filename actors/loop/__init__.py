"""The loop actor, split by phase: `actor.py` (`LoopActor`: its body and public surface),
`turn.py`, `step.py`, `tools.py`, `inbox.py`, handed the actor through the views of
`context.py`; `values.py` holds what they pass between them. Re-exported lazily."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from .actor import LoopActor
    from .context import Compactor
    from .values import (
        CALLER_CANCELLED,
        POST_STEP_GRACE,
        RECONFIGURABLE,
        EndTurn,
        ItemKind,
        NextStep,
        Persist,
        SessionStartKind,
        StepOutcome,
        TurnItem,
    )

__getattr__, __dir__ = lazy_exports(
    globals(),
    {
        "CALLER_CANCELLED": "actorloop.actors.loop.values",
        "POST_STEP_GRACE": "actorloop.actors.loop.values",
        "RECONFIGURABLE": "actorloop.actors.loop.values",
        "Compactor": "actorloop.actors.loop.context",
        "EndTurn": "actorloop.actors.loop.values",
        "ItemKind": "actorloop.actors.loop.values",
        "LoopActor": "actorloop.actors.loop.actor",
        "NextStep": "actorloop.actors.loop.values",
        "Persist": "actorloop.actors.loop.values",
        "SessionStartKind": "actorloop.actors.loop.values",
        "StepOutcome": "actorloop.actors.loop.values",
        "TurnItem": "actorloop.actors.loop.values",
    },
)

__all__ = [
    "CALLER_CANCELLED",
    "POST_STEP_GRACE",
    "RECONFIGURABLE",
    "Compactor",
    "EndTurn",
    "ItemKind",
    "LoopActor",
    "NextStep",
    "Persist",
    "SessionStartKind",
    "StepOutcome",
    "TurnItem",
]
