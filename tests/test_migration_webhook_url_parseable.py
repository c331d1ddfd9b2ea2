"""Deploying webhook_url_parseable over data: a subscription whose URL the sender cannot parse stops
the deploy, named by its id, instead of being changed or dropped behind the DBA's back."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from better_compute import migrate

CHANGE = "webhook_url_parseable"
TENANT = "00000000-0000-4000-8000-0000000000aa"
BAD_URL = "http://[1.2.3.4]/hook"  # passed the old rule; urllib refuses it


def test_a_webhook_the_sender_cannot_parse_stops_the_deploy_with_its_id(empty_database: Callable[[], str]) -> None:
    dsn = empty_database()
    migrate.migrate(dsn)
    names = [change.name for change in migrate.read_plan().changes]
    migrate.revert(dsn, to=names[names.index(CHANGE) - 1])
    with psycopg.connect(dsn) as conn:
        webhook_id = conn.execute("SELECT compute.webhook_create(%s, %s, repeat('s', 32))", (TENANT, BAD_URL)).fetchone()[0]

    with pytest.raises(psycopg.Error) as refused:
        migrate.migrate(dsn)
    assert refused.value.sqlstate == "BC400"
    assert str(webhook_id) in str(refused.value)
    assert refused.value.diag.message_hint is not None and "webhooks.delete" in refused.value.diag.message_hint
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT url FROM compute.webhooks WHERE webhook_id = %s", (webhook_id,)).fetchone() == (BAD_URL,)
        conn.execute("DELETE FROM compute.webhooks WHERE webhook_id = %s", (webhook_id,))

    assert migrate.migrate(dsn) == names[names.index(CHANGE):]
