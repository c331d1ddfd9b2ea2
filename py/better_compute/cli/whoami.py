"""`better-compute whoami`: which relay, tenant and credential the commands use and where each comes
from (flag, environment, profile), and whether the relay accepts the credential."""

from __future__ import annotations

from typing import Any

import typer

from better_compute.cli import config, hints, options, output
from better_compute.cli.client import ApiError, Client


def whoami_command(ctx: typer.Context, **values: Any) -> None:
    """Who the commands act as: the relay, the tenant, the credential (masked) and their sources."""
    given = options.collect(ctx, values)
    settings = given.settings()
    flags = {"url": given.url, "token": given.token, "tenant": given.tenant}
    origin = config.sources(flags, given.profile)
    answer: dict[str, Any] = {
        "url": settings.url, "url_from": origin["url"],
        "tenant": settings.tenant, "tenant_from": origin["tenant"],
        "token": config.masked(settings.token) if settings.token else None, "token_from": origin["token"],
    }
    problem: ApiError | None = None
    try:
        Client(settings).call("sites.list", {"limit": 1}, mutation=False)
        answer["credential"] = "accepted"
    except ApiError as error:
        problem = error
        answer["credential"] = f"{error.code}: {error.message}"
    typer.echo(output.render(answer, given.output_format))
    if problem is not None:
        options.fail(problem.code, problem.message, hints.in_cli_terms(problem))


whoami_command.__signature__ = options.signature(options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
