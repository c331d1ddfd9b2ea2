"""The relay's Starlette application: routes, error envelopes, metrics, start-up and shutdown.

`Relay` holds what the endpoints share (database, IAM port, catalog, metrics, the LISTEN task);
`create_app` wires it into Starlette. Start-up (the lifespan) reads the catalog and initializes
the IAM port with every action; either failing stops the process (P11: a relay never serves
half-authorized).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from better_compute.db import AsyncDatabase
from better_compute.errors import ContractError
from better_compute.ports.iam import AuthorizeRequest, IamPort
from better_compute.relay import console, openapi
from better_compute.relay.admission import ALL_RESOURCES, Admission
from better_compute.relay.catalog import PATH_PREFIX, Catalog, InputSchema
from better_compute.relay.envelope import data_response, error, error_response, invalid_argument, unavailable
from better_compute.relay.inbound import bearer, caller_credential, read_object, tenant
from better_compute.relay.metrics import STREAM, UNKNOWN, MetricsMiddleware, RelayMetrics
from better_compute.relay.sealing import seal_fields
from better_compute.relay.sse import EventStream, EventStreamResponse, Notifier, StreamSettings

log = logging.getLogger(__name__)

EVENTS_METHOD = "events.list"  # the watch stream is decided as this method on every event ("*")
HEALTH_SECONDS = 2.0
DATABASE_OPEN_SECONDS = 10.0
PRODUCT_HEADER = "x-better-compute"
ENDPOINT_LABELS = {  # the `method` label of the relay's own endpoints
    "/health": "health",
    "/metrics": "metrics",
    f"{PATH_PREFIX}/openapi.json": "openapi",
    f"{PATH_PREFIX}/watch": STREAM,
    f"{PATH_PREFIX}/iam/resolve": "iam.resolve",
}
RESOLVE_INPUT = InputSchema.of({
    "type": "object", "required": ["type", "id"], "additionalProperties": False,
    "properties": {"type": {"type": "string", "minLength": 1, "maxLength": 100},
                   "id": {"type": "string", "minLength": 1, "maxLength": 100}},
})


@dataclass(frozen=True)
class RelaySettings:
    resolve_secret: str | None = None  # without one, POST /api/compute/iam/resolve answers 404
    streams: StreamSettings = field(default_factory=StreamSettings)


class StartupError(Exception):
    """The relay cannot serve with this database (P11: better not to start than to half-serve)."""


class Relay:
    """The endpoints and what they share; ready once `start()` has read the catalog."""

    def __init__(self, db: AsyncDatabase, iam: IamPort, settings: RelaySettings):
        self.db = db
        self.iam = iam
        self.settings = settings
        self.metrics = RelayMetrics()
        self.admission = Admission(db, iam, self.metrics)
        self.notifier = Notifier(db)
        self.stopping = asyncio.Event()
        self.catalog = Catalog({})
        self.openapi: dict[str, Any] = {}
        self.open_streams = 0
        self.listener: asyncio.Task[None] | None = None

    # -- life ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the pool, read the catalog, initialize IAM with every action, start LISTEN."""
        try:
            await self.db.open(timeout=DATABASE_OPEN_SECONDS)
            self.catalog = await Catalog.load(self.db)
            if EVENTS_METHOD not in self.catalog:
                raise StartupError(f"the catalog has no {EVENTS_METHOD}, which the event stream is decided as")
            await self.iam.initialize(self.catalog.actions())
        except BaseException:
            await self.db.close()
            await self.iam.aclose()
            raise
        self.openapi = openapi.document(self.catalog)
        self.listener = asyncio.create_task(self.notifier.run())
        log.info("API relay ready: %d methods", len(self.catalog.methods))

    def stop(self) -> None:
        """A signal asked the server to stop: end every event stream (clients resume elsewhere)."""
        self.stopping.set()
        self.notifier.wake_all()

    async def close(self) -> None:
        self.stop()
        if self.listener is not None:
            self.listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.listener
        await self.db.close()
        await self.iam.aclose()

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        try:
            await self.start()
        except Exception as failure:
            log.error("the API relay cannot start: %s", failure)
            raise
        try:
            yield
        finally:
            await self.close()

    # -- endpoints -----------------------------------------------------------------------------------

    async def call(self, request: Request) -> Response:
        """POST /api/compute/{group}/{verb}: any method of the catalog, through the one admission flow."""
        if request.headers.get(PRODUCT_HEADER) != "1":
            raise invalid_argument("the X-Better-Compute: 1 header is missing",
                                   "Every API call sends X-Better-Compute: 1.")
        name = f"{request.path_params['group']}.{request.path_params['verb']}"
        method = self.catalog.get(name)
        if method is None:
            raise error("NOT_FOUND", f"no method {name}", "GET /api/compute/openapi.json lists the methods.")
        credential = caller_credential(request)
        document = await read_object(request)
        method.input.check(document, method.name)
        tenant_id = tenant(request, self.iam, credential)
        document = await seal_fields(self.db, method, tenant_id, document)
        return data_response(await self.admission.run(method, tenant_id, document, credential))

    async def watch(self, request: Request) -> EventStreamResponse:
        """GET /api/compute/watch: the tenant's events from Last-Event-ID on, after one IAM decision."""
        method = self.catalog.methods[EVENTS_METHOD]
        credential = caller_credential(request)
        tenant_id = tenant(request, self.iam, credential)
        self.open_stream()
        wakeup = self.notifier.subscribe()

        def closed() -> None:
            self.notifier.unsubscribe(wakeup)
            self.close_stream()

        try:
            decision = await self.admission.decide(credential, AuthorizeRequest(
                str(tenant_id), method.action, method.resource_type, ALL_RESOURCES))
            if not decision.allowed:
                raise await self.admission.refuse_read(method, tenant_id, decision)
            stream = EventStream(self.db, tenant_id, request.headers.get("last-event-id"), self.settings.streams,
                                 wakeup, self.stopping, self.metrics.event_reads)
            await stream.fetch()  # a bad Last-Event-ID is an error answer, not a broken stream
        except BaseException:
            closed()
            raise
        return EventStreamResponse(stream, closed)

    def open_stream(self) -> None:
        if self.stopping.is_set():
            raise unavailable("the relay is stopping", "Connect again (to another relay).")
        if self.open_streams >= self.settings.streams.max_streams:
            raise unavailable(f"this relay has {self.open_streams} event streams open, its bound",
                              "Connect again later or to another relay.")
        self.open_streams += 1
        self.metrics.streams.inc()

    def close_stream(self) -> None:
        self.open_streams -= 1
        self.metrics.streams.dec()

    async def resolve(self, request: Request) -> Response:
        """POST /api/compute/iam/resolve: Better IAM's resolver, authenticated by the shared secret."""
        secret = self.settings.resolve_secret
        if secret is None:
            raise error("NOT_FOUND", "no resolver here", "Start the relay with --resolve-secret.")
        credential = bearer(request) or ""
        if not hmac.compare_digest(credential.encode(), secret.encode()):
            raise error("ACCESS_DENIED", "the resolver needs the shared secret",
                        "Better IAM sends Authorization: Bearer <resolve secret>.")
        document = await read_object(request)
        RESOLVE_INPUT.check(document, "iam.resolve", "Send {type, id}.")
        return data_response(await self.db.call("api.resolve", document["type"], document["id"]))

    async def health(self, _request: Request) -> Response:
        try:
            await asyncio.wait_for(self.db.call("api.now"), HEALTH_SECONDS)
        except (ContractError, TimeoutError) as failure:
            log.warning("health: the database is unreachable: %s", failure)
            raise unavailable("the database is unreachable") from failure
        return data_response({"status": "ok", "methods": len(self.catalog.methods), "streams": self.open_streams})

    async def prometheus(self, _request: Request) -> Response:
        # In a thread: what `serve all` joins here (the worker's fleet gauges) reads the database.
        content, content_type = await asyncio.to_thread(self.metrics.exposition)
        return Response(content, media_type=content_type)

    async def openapi_json(self, _request: Request) -> Response:
        return JSONResponse(self.openapi)

    def method_label(self, path: str) -> str:
        """The metrics `method` label of a path: bounded by the catalog and the relay's endpoints."""
        if path in ENDPOINT_LABELS:
            return ENDPOINT_LABELS[path]
        if path == console.PATH or path.startswith(console.PATH + "/"):
            return "console"
        name = path.removeprefix(PATH_PREFIX + "/").replace("/", ".", 1)
        return name if path.startswith(PATH_PREFIX + "/") and name in self.catalog else UNKNOWN


Endpoint = Callable[[Request], Awaitable[Response | EventStreamResponse]]


def enveloped(endpoint: Endpoint) -> Endpoint:
    """A refusal (ContractError) answered as its envelope. Not a Starlette exception handler: after
    handling, Starlette assigns the exception's __traceback__, which a frozen ContractError refuses."""

    @functools.wraps(endpoint)
    async def answer(request: Request) -> Response | EventStreamResponse:
        try:
            return await endpoint(request)
        except ContractError as failure:
            return error_response(failure)

    return answer


async def http_error(_request: Request, failure: Exception) -> Response:
    """Starlette's own 404 (no route) and 405 (wrong verb), in the error envelope."""
    assert isinstance(failure, HTTPException)
    if failure.status_code == 404:
        return error_response(error("NOT_FOUND", "no such endpoint",
                                    "GET /api/compute/openapi.json lists the methods."))
    response = error_response(invalid_argument(f"HTTP {failure.status_code}: {failure.detail}", status=failure.status_code))
    response.headers.update(failure.headers or {})  # 405 names the methods it takes (Allow, RFC 9110)
    return response


async def internal_error(_request: Request, _failure: Exception) -> Response:
    """A bug: the envelope for the client; the server logs the traceback."""
    return error_response(error("INTERNAL", "internal error"))


def create_app(relay: Relay) -> ASGIApp:
    routes = [
        Route("/health", enveloped(relay.health), methods=["GET"]),
        Route("/metrics", relay.prometheus, methods=["GET"]),
        Route(f"{PATH_PREFIX}/openapi.json", relay.openapi_json, methods=["GET"]),
        Route(console.PATH, console.index, methods=["GET"]),
        Route(console.PATH + "/", enveloped(console.asset), methods=["GET"]),
        Route(console.PATH + "/{name}", enveloped(console.asset), methods=["GET"]),
        Route(f"{PATH_PREFIX}/watch", enveloped(relay.watch), methods=["GET"]),
        Route(f"{PATH_PREFIX}/iam/resolve", enveloped(relay.resolve), methods=["POST"]),
        Route(PATH_PREFIX + "/{group}/{verb}", enveloped(relay.call), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=relay.lifespan,
                     middleware=[Middleware(MetricsMiddleware, metrics=relay.metrics, label=relay.method_label)],
                     exception_handlers={HTTPException: http_error, Exception: internal_error})
