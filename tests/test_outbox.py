"""The outbox with real concurrent sessions: readers never skip a late commit, per-aggregate sequences
have no gaps, each transaction pokes listeners at most once, and only one at a time pokes."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

EMIT = "SELECT compute.outbox_emit(NULL, 'test', %s, 'test.happened', %s::jsonb)"


def emit(conn: psycopg.Connection, aggregate_id: str, by: str = "test") -> None:
    conn.execute(EMIT, (aggregate_id, f'{{"by": "{by}"}}'))


class Reader:
    """An outbox consumer as bc_worker: reads after its cursor (xid, event_id) and moves the cursor."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn
        self.cursor: tuple[str, int] = ("0", 0)

    def read(self) -> list[str]:
        """The payload `by` of each new event of aggregate type 'test', in delivery order."""
        rows = self.conn.execute("SELECT xid::text, event_id, aggregate_type, payload ->> 'by' "
                                 "FROM worker_api.outbox_read(%s::xid8, %s)", self.cursor).fetchall()
        if rows:
            self.cursor = (rows[-1][0], rows[-1][1])
        return [by for _, _, aggregate_type, by in rows if aggregate_type == "test"]


Session = Callable[..., psycopg.Connection]


@pytest.fixture
def session(db_dsn: str) -> Iterator[Session]:
    """Open sessions on the test database (each closed, uncommitted work rolled back, at the end)."""
    opened: list[psycopg.Connection] = []

    def open_session(**kwargs: bool) -> psycopg.Connection:
        conn = psycopg.connect(db_dsn, **kwargs)
        opened.append(conn)
        return conn

    yield open_session
    for conn in opened:
        conn.close()


@pytest.fixture
def reader(db_dsn: str) -> Iterator[Reader]:
    with psycopg.connect(make_conninfo(db_dsn, options="-c role=bc_worker"), autocommit=True) as conn:
        yield Reader(conn)


def test_an_open_transaction_holds_back_later_commits(session: Session, reader: Reader) -> None:
    a, b = session(), session()
    emit(a, "agg-a", "A")  # A's transaction now has an xid, older than B's
    emit(b, "agg-b", "B")
    b.commit()
    assert reader.read() == []  # B's event waits: A, older, may still commit
    a.commit()
    assert reader.read() == ["A", "B"]  # (xid, event_id) order: A first, though it committed last
    assert reader.read() == []


def test_a_late_commit_is_read_after_the_cursor_passed_later_events(session: Session, reader: Reader) -> None:
    a, b = session(), session()
    b.execute("SELECT pg_current_xact_id()")  # B takes its xid first ...
    emit(a, "agg-a", "A")  # ... A writes first (the smaller event_id) ...
    emit(b, "agg-b", "B")
    b.commit()  # ... and B commits first
    assert reader.read() == ["B"]  # B's xid is below A's: delivered while A is open
    a.commit()
    assert reader.read() == ["A"]  # A's event, numbered before B's, is not skipped


def test_aggregate_sequence_has_no_gap_after_a_rollback(session: Session) -> None:
    writer = session()
    emit(writer, "agg-seq")
    writer.rollback()
    emit(writer, "agg-seq")
    emit(writer, "agg-seq")
    writer.commit()
    emit(writer, "agg-seq")
    writer.rollback()
    emit(writer, "agg-seq")
    writer.commit()
    assert writer.execute("SELECT aggregate_seq FROM compute.outbox WHERE aggregate_id = 'agg-seq' "
                          "ORDER BY event_id").fetchall() == [(1,), (2,), (3,)]


def test_a_transaction_notifies_once(session: Session) -> None:
    listener = session(autocommit=True)
    listener.execute("LISTEN bc_outbox")
    writer = session()
    for _ in range(3):
        emit(writer, "agg-notify")
    writer.commit()
    emit(writer, "agg-notify")
    writer.rollback()
    emit(writer, "agg-notify")
    writer.commit()
    notifies = list(listener.notifies(timeout=0.5))
    assert [(n.channel, n.payload) for n in notifies] == [("bc_outbox", "")] * 2  # two commits, one poke each


GATE = "SELECT pg_advisory_xact_lock(hashtextextended('notify-gate', 0))"  # compute.wake_at_commit's


def test_one_committing_transaction_at_a_time_sends_the_hint(session: Session, reader: Reader) -> None:
    """NOTIFY holds a cluster-wide lock through commit: a writer that commits while another committing
    transaction holds the wake-up gate (here a session holding it) commits without notifying (the
    holder's notification wakes readers, who then find both), so writers never queue behind each
    other's notification."""
    listener = session(autocommit=True)
    listener.execute("LISTEN bc_outbox")
    holder, writer = session(), session()
    holder.execute(GATE)
    emit(writer, "agg-gate", by="skipped")
    writer.commit()
    assert list(listener.notifies(timeout=0.5)) == []
    assert reader.read() == ["skipped"]
    holder.rollback()  # the gate is free again: the next writer notifies
    emit(writer, "agg-gate", by="hinted")
    writer.commit()
    assert [(n.channel, n.payload) for n in listener.notifies(timeout=0.5)] == [("bc_outbox", "")]


def test_an_open_writer_does_not_hold_the_hint_back(session: Session) -> None:
    """The gate is taken as a transaction commits, not when it writes: one left open after writing
    events keeps no other writer from notifying."""
    listener = session(autocommit=True)
    listener.execute("LISTEN bc_outbox")
    open_writer, writer = session(), session()
    emit(open_writer, "agg-open", by="open")
    emit(writer, "agg-open-other", by="other")
    writer.commit()
    assert [(n.channel, n.payload) for n in listener.notifies(timeout=0.5)] == [("bc_outbox", "")]
