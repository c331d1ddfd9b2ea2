"""Retention: delivered outbox events and done work items go after their bounds; nothing else does."""

from __future__ import annotations

import uuid

import psycopg

from worker_support import sealed

TENANT = uuid.UUID("00000000-0000-0000-0000-0000000000aa")


def emit(db: psycopg.Connection, n: int) -> list[int]:
    for _ in range(n):
        db.execute("SELECT compute.outbox_emit(%s, 'reservation', %s, 'reservation.created', '{}')", (TENANT, str(uuid.uuid4())))
    db.commit()
    return [row[0] for row in db.execute("SELECT event_id FROM compute.outbox ORDER BY event_id DESC LIMIT %s", (n,))][::-1]


def count(db: psycopg.Connection, query: str) -> int:
    row = db.execute(query).fetchone()
    assert row is not None
    return int(row[0])


def test_delivered_events_are_pruned_after_retention_and_pending_or_unread_ones_stay(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_pin('2030-01-01 00:00+00')")
    db.execute("SELECT compute.webhook_create(%s, 'http://127.0.0.1:9/hook', %s)", (TENANT, sealed(db, "a-secret-of-16-chars")))
    delivered, pending, dead = emit(db, 3)
    assert db.execute("SELECT compute.webhooks_fan_out()").fetchone() == (3,)
    db.execute("UPDATE compute.webhook_deliveries SET state = 'delivered' WHERE event_id = %s", (delivered,))
    db.execute("UPDATE compute.webhook_deliveries SET state = 'dead' WHERE event_id = %s", (dead,))
    db.commit()
    [unread] = emit(db, 1)  # never fanned out

    db.execute("SELECT compute.clock_advance('6 days')")
    assert db.execute("SELECT compute.outbox_prune()").fetchone() == (0,), "younger than 7 days: kept"
    db.execute("SELECT compute.clock_advance('2 days')")
    assert db.execute("SELECT compute.outbox_prune()").fetchone() == (2,)
    left = {row[0] for row in db.execute("SELECT event_id FROM compute.outbox")}
    assert left == {pending, unread}, "a pending delivery and an event the fan-out has not read stay"


def test_done_work_items_are_pruned_after_a_day(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_pin('2030-01-01 00:00+00')")
    db.execute("DELETE FROM compute.work_periodic")
    db.execute("SELECT compute.work_poke('test.kind', 'done-one'), compute.work_poke('test.kind', 'pending-one', '{}', "
               "'2030-02-01 00:00+00')")
    claimed = db.execute("SELECT work_id, lease_epoch FROM compute.work_claim('me', 10, '1 minute')").fetchall()
    assert len(claimed) == 1
    db.execute("SELECT compute.work_complete(%s, %s)", claimed[0])
    db.commit()
    db.execute("SELECT compute.clock_advance('23 hours')")
    assert db.execute("SELECT compute.work_prune()").fetchone() == (0,)
    db.execute("SELECT compute.clock_advance('2 hours')")
    assert db.execute("SELECT compute.work_prune()").fetchone() == (1,)
    assert count(db, "SELECT count(*) FROM compute.work WHERE key = 'pending-one' AND state = 'pending'") == 1


def test_a_dead_periodic_item_is_not_replaced(db: psycopg.Connection) -> None:
    db.execute("SELECT compute.clock_pin('2030-01-01 00:00+00')")
    db.execute("DELETE FROM compute.work_periodic WHERE kind <> 'usage.export'")
    assert db.execute("SELECT compute.work_ensure_periodic()").fetchone() == (1,)
    db.execute("UPDATE compute.work SET state = 'dead' WHERE kind = 'usage.export'")
    assert db.execute("SELECT compute.work_ensure_periodic()").fetchone() == (0,), "dead stays dead until retried"
    assert count(db, "SELECT count(*) FROM compute.work WHERE kind = 'usage.export'") == 1
