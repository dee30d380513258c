"""Run the server: in this process on a background thread (tests, embedding) or in the foreground.

:class:`ServerThread` binds 127.0.0.1 on a free port chosen by the OS (never a hard-coded one),
runs uvicorn on a daemon thread and exposes ``base_url``; it is a real HTTP server that real
clients (``openai``, ``httpx``) talk to over TCP.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """A uvicorn server for ``app`` on a background thread.

    Args:
        app: the ASGI app.
        host: interface to bind (127.0.0.1 by default).
        port: 0 lets the OS choose a free port.
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> ServerThread:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"server on {self.base_url} did not start")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


def serve(app: Any, host: str, port: int) -> None:
    """Serve ``app`` in the foreground until interrupted (warns when it is open to the network
    without API keys)."""
    from engine.server.tenants import Tenants, warn_if_open

    tenants = getattr(getattr(app, "state", None), "tenants", None)
    warn_if_open(tenants if isinstance(tenants, Tenants) else Tenants(), host)
    uvicorn.run(app, host=host, port=port, log_level="info")
