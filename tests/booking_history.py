"""Bookings added in bulk, as an import or months of use would leave them: for tests and benchmarks
that need a grown bookings table (tests/test_plans_follow_growth.py, bench/plans.py).

Released reservations of one atom each, in consecutive 2-day slots going back from now, for tenants
drawn among `tenants` numbered ones (TENANT_ID_SQL); rows written straight into the real tables,
every trigger on. (No ALTER TABLE ... DISABLE TRIGGER: that would invalidate every cached plan on
these tables, which is what the growth tests must not do for them.)"""

from __future__ import annotations

import psycopg

TENANT_ID_SQL = "('00000000-0000-4000-8000-' || lpad(({n})::text, 12, '0'))::uuid"

_PLAN = """
CREATE TEMP TABLE history ON COMMIT DROP AS
SELECT gen_random_uuid() AS reservation_id, {tenant} AS tenant_id, a.site_id, a.pool_id, a.node_id, a.device_id, a.atom_id,
       a.shape, a.slices, a.shares, a.gpu_fraction,
       tstzrange(now() - (%(first_slot)s + k) * interval '2 days', now() - (%(first_slot)s + k) * interval '2 days' + interval '1 day') AS during
  FROM compute.atoms AS a CROSS JOIN generate_series(1, %(per_atom)s) AS k
 WHERE a.pool_id = ANY (%(pools)s::uuid[]) AND upper_inf(a.valid)
""".format(tenant=TENANT_ID_SQL.format(n="floor(random() * %(tenants)s)::integer"))

_RESERVATIONS = """
INSERT INTO compute.reservations (reservation_id, tenant_id, site_id, pool_id, shape, count, during, state, request_hash,
                                  created_at, activated_at, ended_at, end_reason)
SELECT reservation_id, tenant_id, site_id, pool_id, shape, 1, during, 'released', 'history',
       lower(during) - interval '1 hour', lower(during), upper(during), 'released'
  FROM history
"""

_BOOKINGS = """
INSERT INTO compute.bookings (reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares,
                              gpu_fraction, during, state)
SELECT reservation_id, tenant_id, site_id, pool_id, node_id, device_id, atom_id, slices, shares, gpu_fraction, during, 'released'
  FROM history
"""


def add_history(dsn: str, pools: list[str], per_atom: int, first_slot: int, tenants: int) -> int:
    """`per_atom` released bookings on every current atom of the pools, in slots first_slot+1 ..
    first_slot+per_atom (2 days each) before now; their tenants must exist. Returns bookings added."""
    with psycopg.connect(dsn) as conn:
        conn.execute(_PLAN, {"pools": pools, "per_atom": per_atom, "first_slot": first_slot, "tenants": tenants})
        conn.execute(_RESERVATIONS)
        added = conn.execute(_BOOKINGS).rowcount
    return added
