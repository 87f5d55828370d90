"""Self-signed certificates made in the test (openssl CLI) and an HTTPS SGLang fake on 127.0.0.1."""

from __future__ import annotations

import shutil
import ssl
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.collectors.bodies import Load
from tests.collectors.servers import FakeSGLang, Handler


def make_cert(folder: Path, name: str, *, san: str = "IP:127.0.0.1") -> tuple[Path, Path]:
    """A self-signed (CA:TRUE) P-256 certificate for ``san`` and its key; skips if openssl is missing."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    cert, key = folder / f"{name}.crt", folder / f"{name}.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
            "-addext", f"subjectAltName={san}",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    return cert, key


class _TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    context: ssl.SSLContext

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake runs in the request's own thread, so a client that never finishes it blocks nobody.
        wrapped = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            wrapped.do_handshake()
            super().finish_request(wrapped, client_address)
        except (ssl.SSLError, OSError):
            pass  # the client refused our certificate: that is what the tests check
        finally:
            wrapped.close()


class HTTPSFakeSGLang(FakeSGLang):
    """FakeSGLang served over TLS with ``cert``/``key``."""

    def __init__(self, cert: Path, key: Path, load: Load | None = None) -> None:
        super().__init__(load)
        self._httpd.shutdown()  # replace the plain listener started by LoopbackServer
        self._httpd.server_close()
        self._thread.join(timeout=5)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        server = _TLSServer(("127.0.0.1", 0), Handler)
        server.context = context
        server.owner = self  # type: ignore[attr-defined]
        self._httpd = server  # type: ignore[assignment]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._httpd.server_address[1]}"
