"""Fixtures of the collector tests: loopback servers that are always stopped, and config helpers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from config import ScrapeSettings, Target
from tests.collectors.bodies import Load
from tests.collectors.servers import FakeSGLang, LoopbackServer, Route


@pytest.fixture
def loopback() -> Iterator[Callable[[dict[str, Route]], LoopbackServer]]:
    servers: list[LoopbackServer] = []

    def start(routes: dict[str, Route]) -> LoopbackServer:
        server = LoopbackServer(routes)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def sglang() -> Iterator[Callable[..., FakeSGLang]]:
    servers: list[FakeSGLang] = []

    def start(load: Load | None = None, info: dict[str, Any] | None = None) -> FakeSGLang:
        server = FakeSGLang(load, info)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def target(name: str, url: str, **kwargs: Any) -> Target:
    return Target(name=name, url=url, **kwargs)


def scrape_settings(**kwargs: Any) -> ScrapeSettings:
    values: dict[str, Any] = {"interval_s": 5.0, "timeout_s": 1.0}
    values.update(kwargs)
    return ScrapeSettings(**values)
