"""GET /console: the web console, plain HTML, JavaScript and CSS shipped in the package (docs/console.md).

The files hold no data and need no credential: the page asks for the user's bearer token and
calls the API with it, so every read and every change goes through the same admission as any
client (one IAM decision per request, the tenant's rows only). The relay serves a fixed set of
files; the Content-Security-Policy lets the page load only them and talk only to this relay.
"""

from __future__ import annotations

from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from better_compute.relay.envelope import error

PATH = "/console"
FILES = {"index.html": "text/html; charset=utf-8", "console.js": "text/javascript; charset=utf-8",
         "console.css": "text/css; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def content(name: str) -> bytes:
    return resources.files("better_compute").joinpath("console", name).read_bytes()


async def index(_request: Request) -> Response:
    return RedirectResponse(PATH + "/", status_code=308)


async def asset(request: Request) -> Response:
    """/console/ is the page; /console/{name} one of its files; anything else NOT_FOUND."""
    name = request.path_params.get("name") or "index.html"
    if name not in FILES:
        raise error("NOT_FOUND", f"no console file {name}", "Open /console/.")
    return Response(content(name), media_type=FILES[name], headers=HEADERS)
