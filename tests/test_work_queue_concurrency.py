"""Workers racing on the queue: claim (FOR UPDATE SKIP LOCKED) never hands one item to two of them."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
from psycopg.conninfo import make_conninfo

ITEMS = 2000
WORKERS = 8
BATCH = 5
LEASE_SECONDS = 120  # far longer than the test: no lease expires, so nothing may be claimed twice


class Worker(threading.Thread):
    """Claims a batch, completes each item with its epoch, until a claim comes back empty."""

    def __init__(self, dsn: str, owner: str, start: threading.Barrier):
        super().__init__(name=owner)
        self.dsn, self.owner, self.start_together = dsn, owner, start
        self.completed: list[int] = []
        self.errors: list[psycopg.Error] = []

    def run(self) -> None:
        with psycopg.connect(make_conninfo(self.dsn, options="-c role=bc_worker"), autocommit=True) as conn:
            self.start_together.wait()
            try:
                while claimed := conn.execute("SELECT work_id, lease_epoch FROM worker_api.work_claim(%s, %s, %s, %s)",
                                              (self.owner, BATCH, LEASE_SECONDS, ["test.race"])).fetchall():
                    for work_id, epoch in claimed:
                        conn.execute("SELECT worker_api.work_complete(%s, %s)", (work_id, epoch))
                        self.completed.append(work_id)
            except psycopg.Error as error:  # FENCED would mean two workers held one item
                self.errors.append(error)


def test_concurrent_workers_complete_each_item_exactly_once(db: psycopg.Connection, db_dsn: str) -> None:
    db.execute("SELECT compute.work_poke('test.race', 'item-' || i) FROM generate_series(1, %s) AS i", (ITEMS,))
    db.commit()
    start = threading.Barrier(WORKERS)
    workers = [Worker(db_dsn, f"worker-{n}", start) for n in range(WORKERS)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers)

    assert [str(error) for worker in workers for error in worker.errors] == []
    completions = Counter(work_id for worker in workers for work_id in worker.completed)
    assert len(completions) == ITEMS and set(completions.values()) == {1}  # every item, exactly once
    assert sum(1 for worker in workers if worker.completed) > 1  # the workers really shared the queue
    assert db.execute("SELECT state, min(lease_epoch), max(lease_epoch), count(*) FROM compute.work "
                      "WHERE kind = 'test.race' GROUP BY state").fetchall() == [("done", 1, 1, ITEMS)]
