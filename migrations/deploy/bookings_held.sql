-- Deploy better_compute:bookings_held to pg
-- Bookings are written once as held: the exclusion constraint and the live-booking indexes read state = 'held'; provisional or active is the reservation's state (compute.active_bookings)
-- Written by hand: a table's constraint, indexes and rows, and a new view (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

ALTER TABLE compute.bookings DROP CONSTRAINT bookings_exclusive;
DROP INDEX compute.bookings_atom_live;
DROP INDEX compute.bookings_tenant_pool;
DROP INDEX compute.bookings_node;
DROP INDEX compute.bookings_pool;
ALTER TABLE compute.bookings DROP CONSTRAINT bookings_state_check;
-- The rows change state only in name: no trigger (spec refresh, outbox, atom match) has anything to do.
ALTER TABLE compute.bookings DISABLE TRIGGER USER;
UPDATE compute.bookings SET state = 'held' WHERE state IN ('provisional', 'active');
ALTER TABLE compute.bookings ENABLE TRIGGER USER;
ALTER TABLE compute.bookings ADD CONSTRAINT bookings_state_check CHECK (state IN ('held', 'released', 'void'));
ALTER TABLE compute.bookings ADD CONSTRAINT bookings_exclusive EXCLUDE USING gist
    (site_id WITH =, device_id WITH =, slices WITH &&, shares WITH &&, during WITH &&)
    WHERE (state = 'held');
CREATE INDEX bookings_atom_live ON compute.bookings (atom_id, upper(during)) WHERE state = 'held';
CREATE INDEX bookings_tenant_pool ON compute.bookings (tenant_id, pool_id, upper(during)) WHERE state IN ('held', 'released');
CREATE INDEX bookings_node ON compute.bookings USING gist (node_id, during) WHERE state = 'held';
CREATE INDEX bookings_pool ON compute.bookings USING gist (pool_id, during) WHERE state = 'held';

CREATE VIEW compute.active_bookings AS
    SELECT b.booking_id, b.reservation_id, b.tenant_id, b.project_id, b.site_id, b.pool_id, b.node_id, b.device_id, b.atom_id,
           b.slices, b.shares, b.gpu_fraction, b.during, r.instance_kind
      FROM compute.bookings AS b
      JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
     WHERE b.state = 'held' AND r.state = 'active';
COMMENT ON VIEW compute.active_bookings IS 'Live holds of active reservations: the only bookings a node exposes, grants or bills.';

COMMIT;
