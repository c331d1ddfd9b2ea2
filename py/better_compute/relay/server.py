"""uvicorn around the relay: the listening line, and a graceful stop on SIGTERM / SIGINT.

On a signal uvicorn stops accepting and waits for open responses to finish; event streams never
finish by themselves, so the signal also tells the relay to end them. The lifespan then closes the
LISTEN connection, the pool and the IAM port. A start-up failure exits non-zero (uvicorn's 3).
Connections are served by `BoundedH11Protocol` under the `HttpBounds` given (relay/protocol.py).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from types import FrameType

import uvicorn

from better_compute.relay.app import Relay, create_app
from better_compute.relay.protocol import BoundedH11Protocol, HttpBounds


class RelayServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, relay: Relay):
        super().__init__(config)
        self.relay = relay
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.loop = asyncio.get_running_loop()
            port = self.servers[0].sockets[0].getsockname()[1]
            host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
            print(f"listening on http://{host}:{port}", flush=True)  # what scripts and tests wait for

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self.loop is not None:  # a signal handler runs between bytecodes: hand over to the loop
            self.loop.call_soon_threadsafe(self.relay.stop)


def relay_server(relay: Relay, host: str, port: int, grace_seconds: float, bounds: HttpBounds) -> RelayServer:
    """The relay's uvicorn server; logging is the caller's (uvicorn's own config would print to stdout)."""
    protocol = functools.partial(BoundedH11Protocol, bounds=bounds)  # uvicorn calls it as it would a class
    config = uvicorn.Config(create_app(relay), host=host, port=port, lifespan="on", log_config=None,
                            timeout_graceful_shutdown=grace_seconds, server_header=False,
                            http=protocol,  # type: ignore[arg-type]
                            timeout_keep_alive=bounds.keep_alive_seconds,  # type: ignore[arg-type]
                            limit_concurrency=bounds.max_connections, h11_max_incomplete_event_size=bounds.head_bytes)
    return RelayServer(config, relay)


def serve(relay: Relay, host: str, port: int, grace_seconds: float, bounds: HttpBounds) -> None:
    """Serve until a signal."""
    relay_server(relay, host, port, grace_seconds, bounds).run()
