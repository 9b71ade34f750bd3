"""A property-based pass over /openapi.json (schemathesis, on hypothesis): against a real
`actorloop serve` process with auth on, and one without a token (loopback, where the host
and cross-site checks are on), every generated request — valid and invalid, to
unknown sessions and to a real one with turns in it — gets a documented status with a body
matching its documented schema, invalid data is refused with a 4xx, and nothing is a 500."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)
from serve_kit import TOKEN, ServerProcess, child_env

from actorloop.runtime.service.openapi import openapi_document

AUTH = {"Authorization": f"Bearer {TOKEN}"}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
SEEDED = "fuzz"


@pytest.fixture(scope="module", params=[True, False], ids=["token", "tokenless"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, bool]]:
    auth: bool = request.param
    tmp_path: Path = tmp_path_factory.mktemp("fuzz")
    server = ServerProcess(
        ["--store", f"sqlite:{tmp_path}/fuzz.db", "--max-body-bytes", "65536"],
        child_env(ACTORLOOP_API_TOKEN=TOKEN) if auth else child_env(),
        tmp_path,
    )
    try:
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as client:
            assert client.post("/v1/sessions", json={"session_id": SEEDED}).status_code == 201
            for text in ("hello", "call:lookup the wiki"):
                sent = client.post(f"/v1/sessions/{SEEDED}/messages", json={"content": text})
                assert sent.status_code == 200
        yield server, auth
    finally:
        code, _out, err = server.terminate()
        assert code == 0, err
        assert "Traceback" not in err, err


DOCUMENTS = {auth: openapi_document(auth=auth) for auth in (True, False)}
SCHEMAS = {auth: schemathesis.openapi.from_dict(document) for auth, document in DOCUMENTS.items()}
# Every request carries the token: a case whose only fault is a missing one would be valid.
SCHEMAS[True].config.generation.update(with_security_parameters=False)
DOCUMENT = DOCUMENTS[True]
OPERATIONS = [(path, method.upper()) for path, item in DOCUMENT["paths"].items() for method in item]
# An operation with nothing to get wrong (no parameter, no body) has no invalid request.
CASES = [
    (path, method, mode)
    for path, method in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE
    or {"parameters", "requestBody"} & set(DOCUMENT["paths"][path][method.lower()])
]
EXAMPLES = 25


def test_the_server_serves_the_document_the_fuzz_reads(
    served: tuple[ServerProcess, bool],
) -> None:
    server, auth = served
    assert httpx.get(f"{server.url}/openapi.json").json() == DOCUMENTS[auth]


@pytest.mark.parametrize(
    ("path", "method", "mode"), CASES, ids=[f"{m} {p} {mode.value}" for p, m, mode in CASES]
)
def test_every_response_is_documented_and_none_is_a_500(
    served: tuple[ServerProcess, bool], path: str, method: str, mode: GenerationMode
) -> None:
    server, auth = served
    operation = SCHEMAS[auth][path][method]
    cases = itertools.count()

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def exchange(case: Any) -> None:
        if (
            mode is GenerationMode.POSITIVE
            and "id" in (case.path_parameters or {})
            and next(cases) % 2 == 0
        ):
            # Half the cases go to a real session, so the valid paths do real work too.
            case.path_parameters["id"] = SEEDED
        if path.endswith("/events"):
            case.query = {**(case.query or {}), "follow": "false"}  # a followed stream never ends
        case.call_and_validate(base_url=server.url, headers=AUTH, checks=CHECKS, timeout=60)

    exchange()
