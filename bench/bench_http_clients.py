"""HTTP client candidates for the scrape path, on the same loopback bodies, CPU per request in the same run.

A child process serves the golden SGLang 0.5.23 /metrics body (~87 KB, Content-Length, keep-alive) on
``SPECWATCH_BENCH_HTTP_TARGETS`` (100) ports with ``sim.http`` (the simulated fleet's server). Each candidate
fetches every port once per round, like a collector cycle, for ``SPECWATCH_BENCH_HTTP_ROUNDS`` (20) rounds;
its CPU is this process's utime + stime (all threads) over those rounds, divided by the requests. The body is
only fetched, never parsed: this isolates the transport.

Candidates:

- ``requests_watchdog_threads64``: the old path — ``requests.Session`` with the deadline-watchdog adapter,
  ``stream=True`` + ``iter_content``, a ``ThreadPoolExecutor`` of 64 (the baseline);
- ``urllib3_pool_threads64`` / ``urllib3_pool_threads8``: one urllib3 ``HTTPConnectionPool`` per target used
  directly (``preload_content=False``, read in 64 KiB pieces), 64 or 8 threads;
- ``asyncio_streams``: a minimal HTTP/1.1 GET over ``asyncio.open_connection`` on one event loop, 64 at once;
- ``aiohttp``: ``aiohttp.ClientSession`` on one event loop, 64 at once (only if aiohttp is installed).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import urllib3

from collectors.transport import WATCHDOG, DeadlineAdapter

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
_CHUNK = 64 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")

_SERVER = """
import asyncio, sys
from pathlib import Path
from sim.http import Listener
from sim.server import Reply
body = Path(sys.argv[1]).read_bytes()
reply = Reply(200, body, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
async def main():
    listeners = [Listener("127.0.0.1", 0, lambda *a: reply) for _ in range(int(sys.argv[2]))]
    for listener in listeners:
        await listener.open()
    print(" ".join(str(l.port) for l in listeners), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _cpu_s() -> float:
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _port(url: str) -> int:
    return int(url.split("/")[2].rpartition(":")[2])


def _requests_threads(urls: list[str], rounds: int) -> int:
    session = requests.Session()
    session.trust_env = False
    adapter = DeadlineAdapter(pool_connections=len(urls))
    session.mount("http://", adapter)

    def one(url: str) -> int:
        with WATCHDOG.scope(time.monotonic() + 3):
            response = session.get(url, stream=True, timeout=(3, 3), allow_redirects=False)
            try:
                return sum(len(chunk) for chunk in response.iter_content(_CHUNK))
            finally:
                response.close()

    with ThreadPoolExecutor(64) as pool:
        total = 0
        for _ in range(rounds):
            total += sum(pool.map(one, urls))
    session.close()
    return total


def _urllib3_threads(workers: int) -> Callable[[list[str], int], int]:
    def run(urls: list[str], rounds: int) -> int:
        pools = {url: urllib3.HTTPConnectionPool("127.0.0.1", _port(url), maxsize=1, retries=False, timeout=3)
                 for url in urls}  # fmt: skip

        def one(url: str) -> int:
            with WATCHDOG.scope(time.monotonic() + 3):
                response = pools[url].urlopen(
                    "GET", "/metrics", preload_content=False, redirect=False, retries=False
                )
                try:
                    size = 0
                    while chunk := response.read(_CHUNK):
                        size += len(chunk)
                    return size
                finally:
                    response.release_conn()

        with ThreadPoolExecutor(workers) as pool:
            total = 0
            for _ in range(rounds):
                total += sum(pool.map(one, urls))
        for p in pools.values():
            p.close()
        return total

    return run


def _asyncio_streams(urls: list[str], rounds: int) -> int:
    async def main() -> int:
        conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        limit = asyncio.Semaphore(64)

        async def one(url: str) -> int:
            async with limit, asyncio.timeout(3):
                port = _port(url)
                if url not in conns:
                    conns[url] = await asyncio.open_connection("127.0.0.1", port)
                reader, writer = conns[url]
                writer.write(
                    f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n".encode()
                )
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                return len(await reader.readexactly(length))

        total = 0
        for _ in range(rounds):
            total += sum(await asyncio.gather(*(one(url) for url in urls)))
        for _, writer in conns.values():
            writer.close()
        return total

    return asyncio.run(main())


def _aiohttp(urls: list[str], rounds: int) -> int:
    import aiohttp  # optional: measured only where installed

    async def main() -> int:
        connector = aiohttp.TCPConnector(limit=64, limit_per_host=1)
        timeout = aiohttp.ClientTimeout(total=3)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def one(url: str) -> int:
                async with session.get(url, allow_redirects=False) as response:
                    size = 0
                    async for chunk in response.content.iter_chunked(_CHUNK):
                        size += len(chunk)
                    return size

            total = 0
            for _ in range(rounds):
                total += sum(await asyncio.gather(*(one(url) for url in urls)))
            return total

    return asyncio.run(main())


def main() -> dict[str, object]:
    targets = int(os.environ.get("SPECWATCH_BENCH_HTTP_TARGETS", "100"))
    rounds = int(os.environ.get("SPECWATCH_BENCH_HTTP_ROUNDS", "20"))
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(GOLDEN), str(targets)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        urls = [f"http://127.0.0.1:{port}/metrics" for port in server.stdout.readline().split()]
        candidates: dict[str, Callable[[list[str], int], int]] = {
            "requests_watchdog_threads64": _requests_threads,
            "urllib3_pool_threads64": _urllib3_threads(64),
            "urllib3_pool_threads8": _urllib3_threads(8),
            "asyncio_streams": _asyncio_streams,
        }
        with contextlib.suppress(ImportError):
            import aiohttp  # noqa: F401

            candidates["aiohttp"] = _aiohttp
        body_bytes = GOLDEN.stat().st_size
        per_request_us: dict[str, float] = {}
        for name, run in candidates.items():
            run(urls, 1)  # connect and warm up outside the measurement
            cpu0 = _cpu_s()
            fetched = run(urls, rounds)
            cpu = _cpu_s() - cpu0
            if fetched != body_bytes * targets * rounds:
                raise RuntimeError(
                    f"{name} fetched {fetched} bytes, expected {body_bytes * targets * rounds}"
                )
            per_request_us[name] = round(1e6 * cpu / (targets * rounds), 1)
    finally:
        server.kill()
        server.wait()
    baseline = per_request_us["requests_watchdog_threads64"]
    return {
        "targets": targets,
        "rounds": rounds,
        "body_bytes": body_bytes,
        "cpu_us_per_request": per_request_us,
        "vs_requests_baseline": {k: round(v / baseline, 2) for k, v in per_request_us.items()},
    }
