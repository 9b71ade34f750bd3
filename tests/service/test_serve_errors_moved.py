"""The service's errors live with the service (`actorloop.runtime.service.errors`); their
old names in `actorloop.runtime.errors` still give the same classes for one release, with
a DeprecationWarning, and importing the foundation module loads nothing of the service."""

from __future__ import annotations

import subprocess
import sys

import pytest

import actorloop.runtime.errors as foundation
from actorloop.runtime.errors import ServiceError
from actorloop.runtime.service import errors as service_errors

MOVED = (
    "InvalidRequestBody",
    "UnknownProfile",
    "IdempotencyKeyReused",
    "ServiceDraining",
    "OwnerLost",
    "ServeConfigError",
)


@pytest.mark.parametrize("name", MOVED)
def test_an_old_name_warns_and_is_the_class_the_service_raises(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=f"actorloop.runtime.service.errors.{name}"):
        old = getattr(foundation, name)
    new = getattr(service_errors, name)
    assert old is new and issubclass(new, ServiceError)


def test_unknown_names_still_fail_and_the_foundation_loads_no_service() -> None:
    with pytest.raises(AttributeError):
        foundation.NoSuchError  # noqa: B018
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, actorloop.runtime.errors; "
            "print(sorted(m for m in sys.modules if m.startswith('actorloop.runtime.service')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
