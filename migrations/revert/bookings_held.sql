-- Revert better_compute:bookings_held from pg
-- Bookings are written once as held: the exclusion constraint and the live-booking indexes read state = 'held'; provisional or active is the reservation's state (compute.active_bookings)
-- Written by hand: a table's constraint, indexes and rows, and a new view (docs/migrations.md).

BEGIN;

SET LOCAL ROLE bc_owner;

DROP VIEW compute.active_bookings;

ALTER TABLE compute.bookings DROP CONSTRAINT bookings_exclusive;
DROP INDEX compute.bookings_atom_live;
DROP INDEX compute.bookings_tenant_pool;
DROP INDEX compute.bookings_node;
DROP INDEX compute.bookings_pool;
ALTER TABLE compute.bookings DROP CONSTRAINT bookings_state_check;
ALTER TABLE compute.bookings DISABLE TRIGGER USER;
UPDATE compute.bookings AS b SET state = CASE WHEN r.state = 'active' THEN 'active' ELSE 'provisional' END
  FROM compute.reservations AS r
 WHERE r.reservation_id = b.reservation_id AND b.state = 'held';
ALTER TABLE compute.bookings ENABLE TRIGGER USER;
ALTER TABLE compute.bookings ADD CONSTRAINT bookings_state_check CHECK (state IN ('provisional', 'active', 'released', 'void'));
ALTER TABLE compute.bookings ADD CONSTRAINT bookings_exclusive EXCLUDE USING gist
    (site_id WITH =, device_id WITH =, slices WITH &&, shares WITH &&, during WITH &&)
    WHERE (state IN ('provisional', 'active'));
CREATE INDEX bookings_atom_live ON compute.bookings (atom_id, upper(during)) WHERE state IN ('provisional', 'active');
CREATE INDEX bookings_tenant_pool ON compute.bookings (tenant_id, pool_id, upper(during)) WHERE state IN ('provisional', 'active', 'released');
CREATE INDEX bookings_node ON compute.bookings USING gist (node_id, during) WHERE state IN ('provisional', 'active');
CREATE INDEX bookings_pool ON compute.bookings USING gist (pool_id, during) WHERE state IN ('provisional', 'active');

COMMIT;
