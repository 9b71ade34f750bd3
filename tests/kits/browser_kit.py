"""Headless Chromium for the browser tests: Debian's /usr/bin/chromium (or
$ACTORLOOP_CHROMIUM) driven by Playwright's sync API in a thread of its own, and a bridge
that lets a scenario in that thread run work in the test's trio run."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import trio
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path(os.environ.get("ACTORLOOP_CHROMIUM", "/usr/bin/chromium"))
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
T = TypeVar("T")


class Bridge:
    """Lets a browser scenario (in the browser's thread) run work in the test's trio run."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self._token = token

    def call(self, work: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run `work(*args)` in the trio run and return its result."""
        return trio.from_thread.run(work, *args, trio_token=self._token)


class Chromium:
    """One headless Chromium for the module, in a thread of its own (Playwright's sync API
    belongs to the thread that started it; the server runs in the test's trio thread)."""

    def __init__(self) -> None:
        assert CHROMIUM.exists(), f"no Chromium at {CHROMIUM}: .ci/run installs it"
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="chromium")
        self.browser: Browser = self._pool.submit(self._start).result()

    def _start(self) -> Browser:
        self._playwright = sync_playwright().start()
        # Playwright gives every launch a fresh temporary profile (its own --user-data-dir).
        return self._playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=FLAGS
        )

    async def run(self, scenario: Callable[..., T], *args: Any) -> T:
        """Run `scenario(bridge, browser, *args)` in the browser's thread."""
        bridge = Bridge(trio.lowlevel.current_trio_token())
        future = self._pool.submit(scenario, bridge, self.browser, *args)
        return await trio.to_thread.run_sync(future.result)

    def close(self) -> None:
        def stop() -> None:
            self.browser.close()
            self._playwright.stop()

        self._pool.submit(stop).result()
        self._pool.shutdown()
