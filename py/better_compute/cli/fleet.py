"""`better-compute fleet`: the tenant's fleet as code, through the API like any other client.

`export` writes sites, their pools (GPU model, placement policy, offerings, quotas, the GPU layouts
of their nodes) and the projects and webhooks (never a secret) as YAML. `plan -f` compares a file
with what the relay answers and prints the changes; `apply -f` makes them, each change one API
mutation (one admission, one IAM decision), in the file's order, and stops at the first refusal,
saying what it applied before. Applying a file twice changes nothing the second time.

Things are matched by name (a site; a pool in its site; a project), an offering by its pool and
shape, a quota by its pool and project, a webhook by its URL. What the relay has and the file does
not is left as it is (the plan lists it): apply never deletes. What the API cannot change is a
refusal in the plan (a pool's GPU model, a webhook's event types, a GPU's layout: the operator's
`ops.device_set_layout`); apply stops there.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import typer

from better_compute.cli import hints, options
from better_compute.cli.client import ApiError, Client
from better_compute.cli.options import OptionSpec

app = typer.Typer(no_args_is_help=True, help="Fleet as code: export, plan and apply sites, pools, offerings, quotas, "
                                             "layouts and webhooks (through the API).")

VERSION = 1
LIST = {"limit": 1000}  # the relay's most rows per list (api_list_rows)
OFFERING_FIELDS = ("max_count", "max_duration_seconds", "instance_kind", "vcpus_per_atom", "memory_mib_per_atom")
QUOTA_FIELDS = ("max_atoms", "gpu_hours_per_month")
Ids = dict[tuple[str, ...], str]  # ("site", name) / ("pool", site, pool) / ("project", name) -> id


# -- reading the fleet --------------------------------------------------------------------------------


def read(client: Client) -> tuple[dict[str, Any], Ids]:
    """The tenant's fleet as a fleet document, and the ids of what it names."""
    def get(method: str, body: dict[str, Any]) -> Any:
        return client.call(method, body, mutation=False)

    ids: Ids = {}
    projects = sorted(get("projects.list", LIST), key=lambda project: project["name"])
    for project in projects:
        ids[("project", project["name"])] = project["project_id"]
    sites = []
    for site in sorted(get("sites.list", LIST), key=lambda site: site["name"]):
        ids[("site", site["name"])] = site["site_id"]
        pools = []
        for pool in sorted(get("pools.list", {**LIST, "site_id": site["site_id"]}), key=lambda pool: pool["name"]):
            ids[("pool", site["name"], pool["name"])] = pool["pool_id"]
            pools.append(read_pool(get, pool, projects))
        sites.append({"name": site["name"], "pools": pools})
    webhooks = [{"url": hook["url"], "event_types": sorted(hook.get("event_types") or [])}
                for hook in sorted(get("webhooks.list", {}), key=lambda hook: hook["url"])]
    return {"version": VERSION, "sites": sites, "projects": [{"name": project["name"]} for project in projects],
            "webhooks": webhooks}, ids


def read_pool(get: Callable[[str, dict[str, Any]], Any], pool: dict[str, Any],
              projects: list[dict[str, Any]]) -> dict[str, Any]:
    pool_id = pool["pool_id"]
    offerings = [{"shape": offering["shape"], **{key: offering[key] for key in OFFERING_FIELDS if offering.get(key) is not None}}
                 for offering in get("offerings.list", {"pool_id": pool_id})]
    quotas = []
    for project in [None, *projects]:
        quota = get("quotas.get", {"pool_id": pool_id} | ({"project_id": project["project_id"]} if project else {}))
        if quota and any(quota.get(key) is not None for key in QUOTA_FIELDS):
            quotas.append({"project": project["name"] if project else None,
                           **{key: quota[key] for key in QUOTA_FIELDS if quota.get(key) is not None}})
    layouts = []
    for node in sorted(get("nodes.list", {**LIST, "pool_id": pool_id}), key=lambda node: node["name"]):
        for device in get("nodes.get", {"node_id": node["node_id"]}).get("devices", []):
            if device.get("layout", "whole") != "whole":
                layouts.append({"node": node["name"], "gpu": device["index"], "layout": device["layout"]})
    return {"name": pool["name"], "gpu_model": pool["gpu_model"], "placement_policy": pool["placement_policy"],
            "offerings": sorted(offerings, key=lambda offering: offering["shape"]), "quotas": quotas, "layouts": layouts}


# -- the changes a file asks for ------------------------------------------------------------------------


@dataclass
class Change:
    """One line of the plan; with a method, one API mutation of apply (its body made from the ids
    known when it runs, since a pool's site may be created just before)."""

    sign: str  # + create, ~ change, ! the API cannot make it
    what: str
    detail: str = ""
    method: str | None = None
    body: Callable[[Ids], dict[str, Any]] = field(default=lambda _ids: {})
    learn: Callable[[Ids, Any], None] = field(default=lambda _ids, _answer: None)

    def line(self) -> str:
        return f"{self.sign} {self.what}" + (f": {self.detail}" if self.detail else "")


def differences(current: dict[str, Any], wanted: dict[str, Any], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{key} {json.dumps(current.get(key))} -> {json.dumps(wanted.get(key))}"
                     for key in keys if key in wanted and wanted.get(key) != current.get(key))


def by(items: list[dict[str, Any]], key: str) -> dict[Any, dict[str, Any]]:
    return {item.get(key): item for item in items}


def plan(current: dict[str, Any], wanted: dict[str, Any]) -> tuple[list[Change], list[str]]:
    """The changes that make `current` what `wanted` says, in the file's order; and what the relay
    has that the file does not name (left as it is)."""
    changes: list[Change] = []
    for project in wanted["projects"]:
        if project["name"] not in by(current["projects"], "name"):
            changes.append(Change("+", f"project {project['name']}", method="projects.create",
                                  body=lambda _ids, name=project["name"]: {"name": name},
                                  learn=lambda ids, answer, name=project["name"]: ids.update({("project", name): answer["project_id"]})))
    for site in wanted["sites"]:
        have_site = by(current["sites"], "name").get(site["name"], {"pools": []})
        if site["name"] not in by(current["sites"], "name"):
            changes.append(Change("+", f"site {site['name']}", method="sites.create",
                                  body=lambda _ids, name=site["name"]: {"name": name},
                                  learn=lambda ids, answer, name=site["name"]: ids.update({("site", name): answer["site_id"]})))
        for pool in site["pools"]:
            changes += pool_changes(site["name"], by(have_site["pools"], "name").get(pool["name"]), pool)
    for hook in wanted["webhooks"]:
        have = by(current["webhooks"], "url").get(hook["url"])
        if have is None:
            changes.append(webhook_create(hook))
        elif sorted(hook.get("event_types") or []) != have["event_types"]:
            changes.append(Change("!", f"webhook {hook['url']}", "its event types differ, and the API cannot change a "
                                  "webhook: delete it (better-compute webhooks delete) and apply again"))
    return changes, left_alone(current, wanted)


def pool_changes(site: str, have: dict[str, Any] | None, pool: dict[str, Any]) -> list[Change]:
    name = f"{site}/{pool['name']}"
    key = ("pool", site, pool["name"])
    changes: list[Change] = []
    if have is None:
        changes.append(Change("+", f"pool {name}", f"{pool['gpu_model']}, {pool.get('placement_policy', 'pack')}",
                              "pools.create",
                              lambda ids: {"site_id": ids[("site", site)], "name": pool["name"], "gpu_model": pool["gpu_model"],
                                           "placement_policy": pool.get("placement_policy", "pack")},
                              lambda ids, answer: ids.update({key: answer["pool_id"]})))
        have = {"offerings": [], "quotas": [], "layouts": []}
    elif have["gpu_model"] != pool["gpu_model"]:
        changes.append(Change("!", f"pool {name}", f"gpu_model {have['gpu_model']} -> {pool['gpu_model']}: a pool has one GPU "
                              "model for life; make a new pool"))
    elif pool.get("placement_policy", have["placement_policy"]) != have["placement_policy"]:
        changes.append(Change("~", f"pool {name}", differences(have, pool, ("placement_policy",)), "pools.update",
                              lambda ids: {"pool_id": ids[key], "placement_policy": pool["placement_policy"]}))
    for offering in pool.get("offerings", []):
        old = by(have["offerings"], "shape").get(offering["shape"])
        if old is None or differences(old, offering, OFFERING_FIELDS):
            changes.append(Change("+" if old is None else "~", f"offering {name} {offering['shape']}",
                                  differences(old or {}, offering, OFFERING_FIELDS), "offerings.create",
                                  lambda ids, offering=offering: {"pool_id": ids[key], **offering}))
    for quota in pool.get("quotas", []):
        old = by(have["quotas"], "project").get(quota.get("project"))
        if old is None or differences(old, quota, QUOTA_FIELDS):
            who = f"project {quota['project']}" if quota.get("project") else "the tenant"
            changes.append(Change("+" if old is None else "~", f"quota {name} for {who}",
                                  differences(old or {}, quota, QUOTA_FIELDS), "quotas.set",
                                  lambda ids, quota=quota: {"pool_id": ids[key], **{k: v for k, v in quota.items() if k in QUOTA_FIELDS},
                                                            **({"project_id": ids[("project", quota["project"])]}
                                                               if quota.get("project") else {})}))
    layouts = {(layout["node"], layout["gpu"]): layout["layout"] for layout in have["layouts"]}
    for layout in pool.get("layouts", []):
        if layouts.get((layout["node"], layout["gpu"]), "whole") != layout["layout"]:
            changes.append(Change("!", f"layout {name} {layout['node']} GPU {layout['gpu']}",
                                  f"{layouts.get((layout['node'], layout['gpu']), 'whole')} -> {layout['layout']}: an operator's "
                                  "change (ops.device_set_layout at psql); the API has no method for it"))
    return changes


def webhook_create(hook: dict[str, Any]) -> Change:
    variable = hook.get("secret_env")

    def body(_ids: Ids) -> dict[str, Any]:
        secret = os.environ.get(variable or "")
        if not secret:
            raise ApiError("INVALID_ARGUMENT", f"webhook {hook['url']} needs its secret, which a fleet file never holds",
                           f"Name an environment variable with `secret_env: NAME` in the file and set it"
                           + (f" ({variable} is not set)." if variable else "."))
        return {"url": hook["url"], "secret": secret,
                **({"event_types": hook["event_types"]} if hook.get("event_types") else {})}
    return Change("+", f"webhook {hook['url']}", f"secret from ${variable}" if variable else "", "webhooks.create", body)


def left_alone(current: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    named_sites = by(wanted["sites"], "name")
    extra = [f"site {site['name']}" for site in current["sites"] if site["name"] not in named_sites]
    extra += [f"pool {site['name']}/{pool['name']}" for site in current["sites"] if site["name"] in named_sites
              for pool in site["pools"] if pool["name"] not in by(named_sites[site["name"]]["pools"], "name")]
    extra += [f"project {project['name']}" for project in current["projects"]
              if project["name"] not in by(wanted["projects"], "name")]
    extra += [f"webhook {hook['url']}" for hook in current["webhooks"] if hook["url"] not in by(wanted["webhooks"], "url")]
    return extra


# -- the file -------------------------------------------------------------------------------------------


def load(path: Path) -> dict[str, Any]:
    """A fleet file, its shape checked; BadParameter (exit 2) naming where it is wrong."""
    import yaml

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as error:
        raise typer.BadParameter(f"cannot read {path}: {error}", param_hint="'--file'") from error

    def need(where: str, value: Any, kind: type, *keys: str) -> Any:
        if not isinstance(value, kind) or (isinstance(value, dict) and any(key not in value for key in keys)):
            wanted = f"a {kind.__name__}" + (f" with {', '.join(keys)}" if keys else "")
            raise typer.BadParameter(f"{path}: {where} must be {wanted}", param_hint="'--file'")
        return value

    need("the document", document, dict)
    if document.get("version", VERSION) != VERSION:
        raise typer.BadParameter(f"{path}: version {document['version']} is not {VERSION}", param_hint="'--file'")
    for name in ("sites", "projects", "webhooks"):
        document[name] = need(name, document.get(name) or [], list)
    for i, site in enumerate(document["sites"]):
        need(f"sites[{i}]", site, dict, "name")
        site["pools"] = need(f"sites[{i}].pools", site.get("pools") or [], list)
        for j, pool in enumerate(site["pools"]):
            where = f"sites[{i}].pools[{j}]"
            need(where, pool, dict, "name", "gpu_model")
            for part, keys in (("offerings", ("shape", "max_count", "max_duration_seconds")), ("quotas", ()),
                               ("layouts", ("node", "gpu", "layout"))):
                pool[part] = need(f"{where}.{part}", pool.get(part) or [], list)
                for k, item in enumerate(pool[part]):
                    need(f"{where}.{part}[{k}]", item, dict, *keys)
    for i, project in enumerate(document["projects"]):
        need(f"projects[{i}]", project, dict, "name")
    for i, hook in enumerate(document["webhooks"]):
        need(f"webhooks[{i}]", hook, dict, "url")
    return document


# -- commands -------------------------------------------------------------------------------------------


FILE = OptionSpec("file", ("--file", "-f"), Path, "The fleet file (YAML, as `fleet export` writes it).",
                  default=inspect.Parameter.empty, settings={"exists": True, "dir_okay": False})


def connected(ctx: typer.Context, values: dict[str, Any]) -> Client:
    return Client(options.collect(ctx, values).settings())


def failed(error: ApiError) -> NoReturn:
    options.fail(error.code, error.message, hints.in_cli_terms(error))


def export_command(ctx: typer.Context, **values: Any) -> None:
    """Write the tenant's fleet as YAML (stdout): `better-compute fleet export > fleet.yaml`."""
    given = options.collect(ctx, values)
    try:
        document, _ = read(Client(given.settings()))
    except ApiError as error:
        failed(error)
    if given.format == "json":
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        import yaml

        typer.echo(yaml.safe_dump(document, sort_keys=False, allow_unicode=True), nl=False)


def planned(client: Client, path: Path) -> tuple[list[Change], list[str], Ids]:
    wanted = load(path)
    current, ids = read(client)
    changes, extra = plan(current, wanted)
    return changes, extra, ids


def show(changes: list[Change], extra: list[str]) -> None:
    for change in changes:
        typer.echo(change.line())
    for what in extra:
        typer.echo(f"  {what}: not in the file, left as it is")
    applicable = sum(1 for change in changes if change.method)
    refused = len(changes) - applicable
    typer.echo(f"{applicable} change(s) to apply" + (f", {refused} the API cannot make (!)" if refused else "")
               if changes else "No changes: the fleet is as the file says.")


def plan_command(ctx: typer.Context, file: Path, **values: Any) -> None:
    """What `fleet apply -f FILE` would change (+ create, ~ change, ! the API cannot make it)."""
    try:
        changes, extra, _ = planned(connected(ctx, values), file)
    except ApiError as error:
        failed(error)
    show(changes, extra)


def apply_command(ctx: typer.Context, file: Path, **values: Any) -> None:
    """Make the fleet what FILE says: each change one API call, in order; stops at the first refusal."""
    client = connected(ctx, values)
    try:
        changes, extra, ids = planned(client, file)
    except ApiError as error:
        failed(error)
    applied: list[Change] = []
    for change in changes:
        try:
            if change.method is None:
                raise ApiError("UNSUPPORTED", f"{change.what}: {change.detail}")
            answer = client.call(change.method, change.body(ids), mutation=True)
        except ApiError as error:
            typer.echo(f"applied {len(applied)} of {len(changes)} change(s); stopped at: {change.line()}", err=True)
            failed(ApiError(error.code, error.message, " ".join(filter(None, [
                hints.in_cli_terms(error), "What was applied stays; fix the cause and apply again (applied changes are not made twice)."]))))
        change.learn(ids, answer)
        applied.append(change)
        typer.echo(f"applied {change.line()}")
    typer.echo(f"applied {len(applied)} change(s)" if applied else "No changes: the fleet is as the file says.")
    for what in extra:
        typer.echo(f"  {what}: not in the file, left as it is")


export_command.__signature__ = options.signature(options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
plan_command.__signature__ = options.signature([FILE], options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
apply_command.__signature__ = options.signature([FILE], options.GLOBAL_OPTIONS)  # type: ignore[attr-defined]
app.command("export")(export_command)
app.command("plan")(plan_command)
app.command("apply")(apply_command)
