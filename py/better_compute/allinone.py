"""`better-compute serve all` (docs/architecture.md §2): the API relay, the node gateway and the worker in one
process, for a single machine. The relay and the gateway share one event loop; the worker runs its
own threads. Each keeps its own pool and role (bc_api, bc_gateway, bc_worker), as when apart.

Stopping: SIGTERM or SIGINT stops all three gracefully. uvicorn takes the signals while it serves
and, when it is done, restores the handlers it found and raises the signal again: the handler
installed here first then stops the gateway and the worker too.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from types import FrameType

from better_compute.gateway import Gateway
from better_compute.relay.server import RelayServer
from better_compute.worker.runtime import Worker

log = logging.getLogger(__name__)

STARTUP_FAILURE = 3  # as uvicorn's, when the relay cannot start


def run_all(relay: RelayServer, gateway: Gateway, worker: Worker) -> None:
    """Serve until a signal; returns once the three have stopped."""
    worker_thread = threading.Thread(target=worker.run, name="worker")
    worker_thread.start()
    try:
        asyncio.run(serve_relay_and_gateway(relay, gateway, worker))
    finally:
        worker.stop()
        worker_thread.join()


async def serve_relay_and_gateway(relay: RelayServer, gateway: Gateway, worker: Worker) -> None:
    loop = asyncio.get_running_loop()

    def stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping the relay, the gateway and the worker", signal.Signals(signum).name)
        worker.stop()
        loop.call_soon_threadsafe(gateway.stop)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    relay_task, gateway_task = asyncio.create_task(relay.serve()), asyncio.create_task(gateway.run())
    # Whichever ends first (a signal, or one that cannot start) ends the others.
    await asyncio.wait((relay_task, gateway_task), return_when=asyncio.FIRST_COMPLETED)
    relay.should_exit = True
    relay.relay.stop()
    gateway.stop()
    worker.stop()
    await asyncio.gather(relay_task, gateway_task)
    if not relay.started:
        raise SystemExit(STARTUP_FAILURE)
