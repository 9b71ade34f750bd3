"""A workload file may carry `[profiles.*]` tables for `actorloop serve --profiles`: a run
ignores them, and anything but a table there is still bad input."""

from __future__ import annotations

import pytest

from actorloop.runtime.cli.workload import parse_workload
from actorloop.runtime.errors import WorkloadError

BASE = 'name = "both"\n[coordinator]\ntasks = ["hello"]\n'


def test_profiles_tables_are_kept_for_the_service() -> None:
    workload = parse_workload(BASE + '[profiles.helper]\nmodel = "m"\nsystem = "Be kind."\n', "t")
    assert workload.profiles == {"helper": {"model": "m", "system": "Be kind."}}
    assert workload.coordinator.tasks == ("hello",)


def test_profiles_that_are_not_a_table_are_bad_input() -> None:
    with pytest.raises(WorkloadError, match="profiles must be a table"):
        parse_workload('name = "x"\nprofiles = 3\n[coordinator]\ntasks = ["a"]\n', "t")
