"""The CLI's file of per-model rates genai-prices gave (`known_rates`), so a command that
prices sessions does not import genai-prices on every start; valid for one install of
genai-prices on one UTC day, rebuilt whenever it is missing, stale or unreadable."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import cattrs
import orjson
from attrs import frozen

from ..log.prices import KnownRates, known_rates, seed_rates

CACHE_ENV = "XDG_CACHE_HOME"
CACHE_FILE = "actorloop/genai-prices-rates.json"
"""Under `$XDG_CACHE_HOME` (else `~/.cache`)."""


@frozen
class RatesFile:
    """The file's content: what the genai-prices installed as `version` (see
    `_installed_version`) said on `day` (UTC, ISO)."""

    version: str
    day: str
    known: tuple[KnownRates, ...]


_converter = cattrs.Converter(forbid_extra_keys=True)


def cache_path() -> Path:
    """Where the rates are kept."""
    root = os.environ.get(CACHE_ENV) or str(Path.home() / ".cache")
    return Path(root) / CACHE_FILE


@contextlib.contextmanager
def cached_rates() -> Iterator[None]:
    """Seed the prices module from the cache file when it matches the installed
    genai-prices and today; afterwards write it back if this process priced a model the
    file did not have. Without the `prices` extra it does nothing. The file is only a
    shortcut: one that cannot be read or written is ignored (prices are then asked of
    genai-prices, as without it)."""
    version = _installed_version()
    if version is None:
        yield
        return
    day = datetime.datetime.now(datetime.UTC).date().isoformat()
    path = cache_path()
    seeded = _read(path, version, day)
    seed_rates(seeded)
    yield
    known = known_rates()
    if set(known) != set(seeded):
        _write(path, RatesFile(version, day, known))


def _installed_version() -> str | None:
    """What names the installed genai-prices (its price table's file: path, size and
    modification time), found without importing it or `importlib.metadata` (either costs
    more than this shortcut saves); None when it is not installed."""
    try:
        spec = importlib.util.find_spec("genai_prices")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    table = Path(next(iter(spec.submodule_search_locations))) / "data_snapshot.py"
    try:
        stat = table.stat()
    except OSError:
        return None
    return f"{table} {stat.st_size} {stat.st_mtime_ns}"


def _read(path: Path, version: str, day: str) -> tuple[KnownRates, ...]:
    try:
        raw = orjson.loads(path.read_bytes())
        if not isinstance(raw, dict):
            return ()
        content = _converter.structure(raw, RatesFile)
        for entry in content.known:
            for rate in entry.rates or ():
                decimal.Decimal(rate)
    except (OSError, ValueError, TypeError, ArithmeticError, cattrs.BaseValidationError):
        return ()
    if (content.version, content.day) != (version, day):
        return ()
    return content.known


def _write(path: Path, content: RatesFile) -> None:
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(orjson.dumps(_converter.unstructure(content)))
        partial.replace(path)  # readers see the old file or the new one, never half of it
    except OSError:
        partial.unlink(missing_ok=True)
