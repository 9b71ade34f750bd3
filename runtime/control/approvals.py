"""What a caller's decision carries, checked before it is queued: edited arguments as the
JSON object text the call runs with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ...codecs.jsonvalue import freeze_json, thaw_json


def decision_arguments(arguments: str | Mapping[str, Any] | None) -> str | None:
    """Edited arguments as JSON object text (None: the call runs as the model asked).
    A mapping is encoded; a str must already be a JSON object (TypeError/ValueError)."""
    if arguments is None:
        return None
    if isinstance(arguments, str):
        try:
            value = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"edited arguments are not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError("edited arguments must be a JSON object")
        return arguments
    if not isinstance(arguments, Mapping):
        raise TypeError(f"arguments must be a JSON object text or a mapping, got {arguments!r}")
    frozen = freeze_json(dict(arguments), "$.arguments")
    return orjson.dumps(thaw_json(frozen)).decode()
