"""HTTP clients on the same loopback answers, CPU per request in the same run: the scrape path, and the
synchronous callers (PromQL queries, probes, notifications) — which decided that specwatch speaks HTTP with
one library, aiohttp, through one edge (``collectors.http``).

A child process serves, with ``sim.http`` (the simulated fleet's server), the golden SGLang 0.5.23 /metrics
body (~87 KB, Content-Length, keep-alive) on ``SPECWATCH_BENCH_HTTP_TARGETS`` (100) ports, and on one more
port a PromQL-shaped JSON answer to POSTs: an instant vector (~2 KB) or a range answer (~1 MB).
CPU is this process's utime + stime (all threads) over the measured requests, divided by them; bodies are
only fetched, never parsed: this isolates the transport.

Scrape candidates — each fetches every port once per round, like a collector cycle, for
``SPECWATCH_BENCH_HTTP_ROUNDS`` (20) rounds:

- ``requests_threads64``: the old path — a ``requests.Session`` with a pool per target, ``stream=True`` +
  ``iter_content``, a ``ThreadPoolExecutor`` of 64 (the baseline; without the deadline watchdog it had then,
  which only added to its cost);
- ``urllib3_pool_threads64`` / ``urllib3_pool_threads8``: one urllib3 ``HTTPConnectionPool`` per target used
  directly (``preload_content=False``, read in 64 KiB pieces), 64 or 8 threads;
- ``asyncio_streams``: a minimal HTTP/1.1 GET over ``asyncio.open_connection`` on one event loop, 64 at once;
- ``aiohttp``: a bare ``aiohttp.ClientSession`` on one event loop, 64 at once;
- ``edge``: what the collector runs — ``collectors.http.targets.TargetClient.fetch`` on the process's HTTP
  loop (deadline, byte cap, error translation included), 64 at once.

Synchronous callers — ``SPECWATCH_BENCH_HTTP_QUERIES`` (1000) small POSTs or a quarter as many large ones,
from 1 and from 4 threads (the Prometheus source's query pool), each waiting for its answer:

- ``requests``: a ``requests.Session``, ``stream=True`` + ``iter_content`` (how PromQL was sent before);
- ``edge``: the coroutine handed to the HTTP loop from the calling thread (``HttpLoop.run``), the request
  through ``exchange`` + ``read_body`` on the services session (how PromQL is sent now).

Wall time per request is reported beside CPU: a synchronous caller waits for the loop thread's turn.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests
import requests.adapters
import urllib3

from bench.measure import process_cpu_s
from collectors.http.exchange import exchange, read_body
from collectors.http.failures import What
from collectors.http.loop import HTTP_LOOP
from collectors.http.targets import TargetClient
from config import ScrapeSettings, Target

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "sglang-0.5.23-hybrid-mtp-tp2.prom"
_CHUNK = 64 * 1024

_SERVER = """
import asyncio, json, sys
from pathlib import Path
from sim.http import Listener
from sim.server import Reply
body = Path(sys.argv[1]).read_bytes()
reply = Reply(200, body, {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
def series(i, points):
    return {"metric": {"instance": f"10.0.0.{i}:30000", "job": "sglang"},
            "values": [[1.8e9 + 15 * j, str(0.5 * j)] for j in range(points)]}
small = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": s["metric"], "value": s["values"][0]} for s in (series(i, 1) for i in range(20))]}}).encode()
big = json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                 "result": [series(i, 1000) for i in range(40)]}}).encode()
answers = {"/small": Reply(200, small, {"Content-Type": "application/json"}),
           "/big": Reply(200, big, {"Content-Type": "application/json"})}
async def main():
    listeners = [Listener("127.0.0.1", 0, lambda *a: reply) for _ in range(int(sys.argv[2]))]
    listeners.append(Listener("127.0.0.1", 0, lambda method, target, *a: answers[target]))
    for listener in listeners:
        await listener.open()
    print(" ".join(str(l.port) for l in listeners), len(small), len(big), flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""
_QUERY = {
    "query": 'sum by (instance) (rate(sglang:spec_verify_ct_total{job="sglang"}[1m]))',
    "timeout": "3000ms",
}


def _port(url: str) -> int:
    return int(url.split("/")[2].rpartition(":")[2])


def _requests_session(pools: int) -> requests.Session:
    session = requests.Session()
    session.trust_env = False
    adapter = requests.adapters.HTTPAdapter(pool_connections=pools, pool_maxsize=4, max_retries=0)
    session.mount("http://", adapter)
    return session


def _requests_threads(urls: list[str], rounds: int) -> int:
    session = _requests_session(len(urls))

    def one(url: str) -> int:
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
    import aiohttp

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


def _edge(urls: list[str], rounds: int) -> int:
    client = TargetClient(ScrapeSettings(timeout_s=3))
    targets = [Target(name=f"t{i}", url=url.removesuffix("/metrics")) for i, url in enumerate(urls)]

    async def main() -> int:
        slots = asyncio.Semaphore(64)

        async def one(target: Target) -> int:
            async with slots:
                return len((await client.fetch(target, "/metrics")).body)

        total = 0
        for _ in range(rounds):
            total += sum(await asyncio.gather(*(one(target) for target in targets)))
        return total

    return HTTP_LOOP.run(main())


# -- the synchronous callers ---------------------------------------------------------------------------------
def _requests_posts(url: str, count: int, threads: int) -> int:
    session = requests.Session()

    def one(_: int) -> int:
        response = session.post(url, data=_QUERY, timeout=3, stream=True)
        with response:
            return sum(len(chunk) for chunk in response.iter_content(1 << 20))

    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(one, range(count)))
    session.close()
    return total


def _edge_posts(url: str, count: int, threads: int) -> int:
    what = What("the bench's server", 3.0)

    async def post() -> int:
        deadline = time.monotonic() + 3
        async with exchange("POST", url, what, deadline=deadline, data=_QUERY, services=True) as response:
            return len(await read_body(response, 1 << 30, deadline))

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(lambda _: HTTP_LOOP.run(post()), range(count)))


def _sync_callers(port: int, sizes: dict[str, int], queries: int) -> dict[str, dict[str, float]]:
    found: dict[str, dict[str, float]] = {}
    for answer, count in (("small", queries), ("big", max(queries // 4, 5))):
        url = f"http://127.0.0.1:{port}/{answer}"
        for threads in (1, 4):
            for name, run in (("requests", _requests_posts), ("edge", _edge_posts)):
                run(url, threads, threads)  # connect and warm up outside the measurement
                cpu0, wall0 = process_cpu_s(), time.perf_counter()
                fetched = run(url, count, threads)
                cpu, wall = process_cpu_s() - cpu0, time.perf_counter() - wall0
                if fetched != sizes[answer] * count:
                    raise RuntimeError(f"{name} fetched {fetched} bytes, expected {sizes[answer] * count}")
                found[f"{name}_{answer}_threads{threads}"] = {
                    "cpu_us_per_request": round(1e6 * cpu / count, 1),
                    "wall_ms_per_request": round(1e3 * wall * threads / count, 3),
                }
    return found


def main() -> dict[str, object]:
    targets = int(os.environ.get("SPECWATCH_BENCH_HTTP_TARGETS", "100"))
    rounds = int(os.environ.get("SPECWATCH_BENCH_HTTP_ROUNDS", "20"))
    queries = int(os.environ.get("SPECWATCH_BENCH_HTTP_QUERIES", "1000"))
    server = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(GOLDEN), str(targets)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        *ports, small_bytes, big_bytes = server.stdout.readline().split()
        urls = [f"http://127.0.0.1:{port}/metrics" for port in ports[:-1]]
        candidates: dict[str, Callable[[list[str], int], int]] = {
            "requests_threads64": _requests_threads,
            "urllib3_pool_threads64": _urllib3_threads(64),
            "urllib3_pool_threads8": _urllib3_threads(8),
            "asyncio_streams": _asyncio_streams,
            "aiohttp": _aiohttp,
            "edge": _edge,
        }
        body_bytes = GOLDEN.stat().st_size
        per_request_us: dict[str, float] = {}
        for name, run in candidates.items():
            run(urls, 1)  # connect and warm up outside the measurement
            cpu0 = process_cpu_s()
            fetched = run(urls, rounds)
            cpu = process_cpu_s() - cpu0
            if fetched != body_bytes * targets * rounds:
                raise RuntimeError(
                    f"{name} fetched {fetched} bytes, expected {body_bytes * targets * rounds}"
                )
            per_request_us[name] = round(1e6 * cpu / (targets * rounds), 1)
        sizes = {"small": int(small_bytes), "big": int(big_bytes)}
        sync = _sync_callers(int(ports[-1]), sizes, queries)
    finally:
        HTTP_LOOP.close()
        server.kill()
        server.wait()
    baseline = per_request_us["requests_threads64"]
    return {
        "targets": targets,
        "rounds": rounds,
        "body_bytes": body_bytes,
        "cpu_us_per_request": per_request_us,
        "vs_requests_baseline": {k: round(v / baseline, 2) for k, v in per_request_us.items()},
        "sync_answer_bytes": sizes,
        "sync_callers": sync,
        "sync_edge_vs_requests_cpu": {
            key.removeprefix("edge_"): round(
                value["cpu_us_per_request"]
                / sync["requests_" + key.removeprefix("edge_")]["cpu_us_per_request"],
                2,
            )
            for key, value in sync.items()
            if key.startswith("edge_")
        },
    }
