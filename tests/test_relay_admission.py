"""The relay's admission flow against callers IAM does not know, with the real relay process, a
real Better IAM stand-in (tests/iam_server.py) and a real database:

- an unknown credential learns nothing about what exists: the refusals of api.prepare (NOT_FOUND,
  conflicts) are answered only after the one IAM decision, so existing and random ids both
  answer 403;
- bogus callers flooding reservations.create hold at most admissions_pending_per_credential
  admissions each while IAM decides, so an authorised tenant's success rate barely moves.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from fleet import WHOLE, make_pool
from iam_server import IamServer, TokenPolicy, statement, write_static_iam
from relay_support import Relay, better_iam, headers, running_relay, static_iam

TENANT = "00000000-0000-4000-8000-00000000000a"
ALICE = "alice-token"
STRANGER = "a-token-iam-does-not-know"
LEGIT = "legit-token"
BOGUS_CALLERS = 8
THREADS_PER_BOGUS_CALLER = 4
PENDING_PER_CREDENTIAL = 2  # the bound under test (admissions_pending_per_credential), set low to keep the flood small
GPUS = 24  # > 8 bogus callers x 2 pending admissions (16 atoms), < 8 x 4 threads (32): without the bound the flood takes the pool
LEGIT_REQUESTS = 30
IAM_DELAY_SECONDS = 0.2


def end_in(db: psycopg.Connection, hours: int) -> str:
    return (db.execute("SELECT compute.compute_now()").fetchone()[0] + timedelta(hours=hours)).isoformat()


# -- no existence oracle -------------------------------------------------------------------------------

@pytest.fixture
def relay(db_dsn: str, tmp_path: Path) -> Iterator[Relay]:
    iam_file = write_static_iam(tmp_path / "iam.toml", [(ALICE, "user:alice", TENANT, [statement("allow")])])
    with running_relay(db_dsn, static_iam(iam_file)) as running:
        yield running


def test_an_unknown_credential_gets_403_for_existing_and_random_ids_alike(relay: Relay, db: psycopg.Connection) -> None:
    pool_id = str(make_pool(db, [[WHOLE]], shapes=("gpu",), tenant_id=TENANT))
    db.commit()
    reservation = relay.data("reservations.create", {"pool_id": pool_id, "shape": "gpu", "count": 1, "end": end_in(db, 1)},
                             ALICE, TENANT)
    missing = str(uuid.uuid4())
    asks = {
        "reservations.get": ({"reservation_id": reservation["reservation_id"]}, {"reservation_id": missing}),
        "pools.get": ({"pool_id": pool_id}, {"pool_id": missing}),
        "reservations.release": ({"reservation_id": reservation["reservation_id"]}, {"reservation_id": missing}),
        "reservations.create": ({"pool_id": pool_id, "shape": "gpu", "count": 1, "end": end_in(db, 1)},
                                {"pool_id": missing, "shape": "gpu", "count": 1, "end": end_in(db, 1)}),
    }
    for method, (existing, random) in asks.items():
        answers = [relay.post(method, document, STRANGER, TENANT) for document in (existing, random)]
        assert [answer.status_code for answer in answers] == [403, 403], (method, [a.text for a in answers])
        assert answers[0].json() == answers[1].json(), method
    # A caller IAM allows still learns that an id is not there (it is its own tenant).
    assert relay.post("reservations.get", {"reservation_id": missing}, ALICE, TENANT).status_code == 404
    # The pool was full (one GPU, held by alice): the stranger is not told that either.
    assert relay.data("reservations.get", {"reservation_id": reservation["reservation_id"]}, ALICE, TENANT)["state"] == "active"


# -- bogus callers cannot take an authorised tenant's capacity ------------------------------------------

class Flood:
    """BOGUS_CALLERS callers, each with its own unknown token and THREADS_PER_BOGUS_CALLER loops of
    reservations.create in the tenant's pool, until stopped; counts their answers."""

    def __init__(self, relay: Relay, pool_id: str, end: str):
        self.relay, self.pool_id, self.end = relay, pool_id, end
        self.stop = threading.Event()
        self.answers: Counter[int] = Counter()
        self.lock = threading.Lock()

    def loop(self, token: str) -> None:
        document = {"pool_id": self.pool_id, "shape": "gpu", "count": 1, "end": self.end}
        with httpx.Client(base_url=self.relay.url, headers=headers(token, TENANT), timeout=30) as client:
            while not self.stop.is_set():
                status = client.post("/api/compute/reservations/create", json=document).status_code
                with self.lock:
                    self.answers[status] += 1

    def run(self, pool: ThreadPoolExecutor) -> list[Any]:
        return [pool.submit(self.loop, f"bogus-{caller}") for caller in range(BOGUS_CALLERS)
                for _ in range(THREADS_PER_BOGUS_CALLER)]


def legit_success_rate(relay: Relay, db_dsn: str, pool_id: str, end: str) -> tuple[float, Counter[str]]:
    """LEGIT_REQUESTS reservations.create of one GPU in a row, each released at once (by the
    operator, so that only creates go through IAM); the share that succeeded, and the failures."""
    succeeded = 0
    failures: Counter[str] = Counter()
    with psycopg.connect(db_dsn, autocommit=True) as operator, \
            httpx.Client(base_url=relay.url, headers=headers(LEGIT, TENANT), timeout=30) as client:
        for _ in range(LEGIT_REQUESTS):
            answer = client.post("/api/compute/reservations/create",
                                 json={"pool_id": pool_id, "shape": "gpu", "count": 1, "end": end})
            if answer.status_code == 200:
                succeeded += 1
                operator.execute("SELECT compute.reservation_release(%s)", (answer.json()["data"]["reservation_id"],))
            else:
                failures[f"{answer.json()['error']['code']}: {answer.json()['error']['hint']}"] += 1
    return succeeded / LEGIT_REQUESTS, failures


def most_pending_per_bogus_credential(db_dsn: str, stop: threading.Event) -> int:
    """Sampled while the flood runs: the most admissions one credential had pending at once."""
    most = 0
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        while not stop.wait(0.05):
            row = conn.execute("SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM compute.admissions "
                               "WHERE state = 'pending' GROUP BY credential_sha256) AS c").fetchone()
            most = max(most, row[0])
    return most


def test_eight_bogus_callers_change_an_authorised_tenants_success_rate_by_less_than_5_percent(
        db_dsn: str, db: psycopg.Connection) -> None:
    db.execute("UPDATE compute.limits SET value = %s WHERE name = 'admissions_pending_per_credential'", (PENDING_PER_CREDENTIAL,))
    pool_id = str(make_pool(db, [[WHOLE] * 8] * (GPUS // 8), shapes=("gpu",), max_count=1, tenant_id=TENANT))
    end = end_in(db, 1)
    db.commit()
    actions = [row[0] for row in db.execute("SELECT action FROM api.catalog()")]
    policies = {LEGIT: TokenPolicy(TENANT)}  # every other token is unknown: denied
    with IamServer(mode="policy", policies=policies, catalog=actions, service_token="relay-service-token",
                   delay=IAM_DELAY_SECONDS) as iam, \
            running_relay(db_dsn, better_iam(iam.url, timeout=10.0), ["--pool-size", "20"]) as relay:
        alone, _ = legit_success_rate(relay, db_dsn, pool_id, end)
        flood = Flood(relay, pool_id, end)
        with ThreadPoolExecutor(BOGUS_CALLERS * THREADS_PER_BOGUS_CALLER + 1) as pool:
            loops = flood.run(pool)
            sampler = pool.submit(most_pending_per_bogus_credential, db_dsn, flood.stop)
            time.sleep(2 * IAM_DELAY_SECONDS)  # the flood is under way
            flooded, failures = legit_success_rate(relay, db_dsn, pool_id, end)
            flood.stop.set()
            for loop in loops:
                loop.result()
            most_pending = sampler.result()
    assert alone == 1.0
    assert alone - flooded < 0.05, f"alone {alone:.0%}, under the flood {flooded:.0%}: {dict(failures)}; bogus answers {dict(flood.answers)}"
    assert most_pending == PENDING_PER_CREDENTIAL, "the flood reached the bound (and not past it)"
    assert set(flood.answers) == {403}, f"a bogus caller is only ever told ACCESS_DENIED: {dict(flood.answers)}"
    assert sum(flood.answers.values()) > LEGIT_REQUESTS, dict(flood.answers)
