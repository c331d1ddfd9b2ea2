-- Reservations and bookings (docs/architecture.md §5-6): who holds what, when.
--   reservation  a tenant's request: pool, shape, count, window [start, end), lease, idempotency key
--   booking      one row per atom per reservation; the rows the exclusion constraint guards. A
--                booking is written once as a live hold (state 'held'); whether it is provisional or
--                active is its reservation's state, so activation updates the reservation row only.
--                Everything that exposes or bills an active hold reads compute.active_bookings (the
--                lint rule booking-state refuses a booking state compared with 'active' or 'provisional').
--
-- The constraint: two live bookings (held, of a provisional or an active reservation) never share a device's memory slice
-- and share at the same instant. A whole GPU conflicts with any MIG instance or slot of that GPU in
-- an overlapping window, two time-slice slots never conflict, adjacent windows [a,b) [b,c) don't,
-- and future bookings are checked like current ones. site_id leads the key so the constraint
-- stays valid when tables are distributed by site.
-- Release truncates `during` to end at compute_now(); the row stays, and usage is computed from it.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.reservations (
    reservation_id  uuid CONSTRAINT reservations_pkey PRIMARY KEY,
    tenant_id       uuid NOT NULL CONSTRAINT reservations_tenant_id_fkey REFERENCES compute.tenants,
    project_id      uuid,
    site_id         uuid NOT NULL,
    pool_id         uuid NOT NULL,
    shape           text NOT NULL,
    count           integer NOT NULL CONSTRAINT reservations_count_check CHECK (count > 0),
    during          tstzrange NOT NULL CONSTRAINT reservations_during_check CHECK (NOT isempty(during) AND lower_inc(during) AND NOT upper_inc(during)
                                              AND NOT lower_inf(during) AND NOT upper_inf(during)),
    same_node       boolean NOT NULL DEFAULT false,
    state           text NOT NULL CONSTRAINT reservations_state_check CHECK (state IN ('provisional', 'active', 'released', 'cancelled', 'void', 'expired')),
    expires_at      timestamptz,
    hold_seconds    integer CONSTRAINT reservations_hold_seconds_check CHECK (hold_seconds > 0),
    hold_until      timestamptz,
    idempotency_key text CONSTRAINT reservations_idempotency_key_check CHECK (length(idempotency_key) BETWEEN 1 AND 200),
    request_hash    text NOT NULL,
    created_at      timestamptz NOT NULL,
    activated_at    timestamptz,
    ended_at        timestamptz,
    end_reason      text,
    instance_kind   text NOT NULL DEFAULT 'devices' CONSTRAINT reservations_instance_kind_check CHECK (instance_kind IN ('devices', 'bare_metal', 'vps')),
    CONSTRAINT reservations_provisional_has_expiry CHECK ((state = 'provisional') = (expires_at IS NOT NULL)),
    CONSTRAINT reservations_lease_has_hold_until CHECK ((hold_seconds IS NULL) = (hold_until IS NULL)),
    CONSTRAINT reservations_project_id_tenant_id_fkey FOREIGN KEY (project_id, tenant_id) REFERENCES compute.projects (project_id, tenant_id),
    CONSTRAINT reservations_pool_id_site_id_fkey FOREIGN KEY (pool_id, site_id) REFERENCES compute.pools (pool_id, site_id),
    CONSTRAINT reservations_tenant_id_idempotency_key_key UNIQUE (tenant_id, idempotency_key)
);
CREATE INDEX reservations_provisional ON compute.reservations (expires_at) WHERE state = 'provisional';
CREATE INDEX reservations_held ON compute.reservations (hold_until) WHERE state = 'active' AND hold_until IS NOT NULL;
CREATE INDEX reservations_tenant ON compute.reservations (tenant_id, created_at);
COMMENT ON TABLE compute.reservations IS 'A tenant''s request for count atoms of a shape in a pool during [start, end).';

CREATE TABLE compute.bookings (
    booking_id     bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT bookings_pkey PRIMARY KEY,
    reservation_id uuid NOT NULL CONSTRAINT bookings_reservation_id_fkey REFERENCES compute.reservations,
    tenant_id      uuid NOT NULL,
    project_id     uuid,
    site_id        uuid NOT NULL,
    pool_id        uuid NOT NULL,
    node_id        uuid NOT NULL,
    device_id      uuid NOT NULL,
    atom_id        uuid NOT NULL CONSTRAINT bookings_atom_id_fkey REFERENCES compute.atoms,
    slices         int4range NOT NULL,
    shares         int4range NOT NULL,
    gpu_fraction   numeric NOT NULL,
    during         tstzrange NOT NULL CONSTRAINT bookings_during_check CHECK (NOT isempty(during) AND lower_inc(during) AND NOT upper_inc(during)
                                             AND NOT lower_inf(during) AND NOT upper_inf(during)),
    state          text NOT NULL CONSTRAINT bookings_state_check CHECK (state IN ('held', 'released', 'void')),
    CONSTRAINT bookings_exclusive EXCLUDE USING gist
        (site_id WITH =, device_id WITH =, slices WITH &&, shares WITH &&, during WITH &&)
        WHERE (state = 'held')
);
CREATE INDEX bookings_reservation ON compute.bookings (reservation_id);
CREATE INDEX bookings_atom ON compute.bookings (atom_id);
-- Live bookings by atom: what compute.atom_held reads, a btree on purpose (see there).
CREATE INDEX bookings_atom_live ON compute.bookings (atom_id, upper(during)) WHERE state = 'held';
CREATE INDEX bookings_tenant_pool ON compute.bookings (tenant_id, pool_id, upper(during))
    WHERE state IN ('held', 'released');
CREATE INDEX bookings_node ON compute.bookings USING gist (node_id, during) WHERE state = 'held';
CREATE INDEX bookings_pool ON compute.bookings USING gist (pool_id, during) WHERE state = 'held';
-- The one reader of "active": live holds of active reservations (node specs, CDI, readiness,
-- instances, ops views), with the reservation's instance kind. A provisional hold (before the IAM
-- decision) is held against other placements but never exposed.
CREATE VIEW compute.active_bookings AS
    SELECT b.booking_id, b.reservation_id, b.tenant_id, b.project_id, b.site_id, b.pool_id, b.node_id, b.device_id, b.atom_id,
           b.slices, b.shares, b.gpu_fraction, b.during, r.instance_kind
      FROM compute.bookings AS b
      JOIN compute.reservations AS r ON r.reservation_id = b.reservation_id
     WHERE b.state = 'held' AND r.state = 'active';
COMMENT ON VIEW compute.active_bookings IS 'Live holds of active reservations: the only bookings a node exposes, grants or bills.';

-- A booking's state as the API shows it (provisional, active, released, void): a live hold is its reservation's.
CREATE FUNCTION compute.booking_state(p_booking_state text, p_reservation_state text)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT CASE WHEN p_booking_state = 'held' THEN p_reservation_state ELSE p_booking_state END $$;
COMMENT ON FUNCTION compute.booking_state(text, text) IS 'A booking''s state as shown: a held booking is provisional or active as its reservation is.';

COMMENT ON TABLE compute.bookings IS 'One atom held by one reservation during a window; bookings_exclusive makes it exclusive.';

-- A booking is its atom's: same device, slices and shares, and inside the atom's validity.
CREATE FUNCTION compute.booking_matches_atom()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_atom compute.atoms;
BEGIN
    IF NEW.state <> 'held' THEN
        RETURN NEW;
    END IF;
    SELECT * INTO v_atom FROM compute.atoms AS a WHERE a.atom_id = NEW.atom_id;
    IF (v_atom.device_id, v_atom.site_id, v_atom.node_id, v_atom.pool_id, v_atom.slices, v_atom.shares)
       IS DISTINCT FROM (NEW.device_id, NEW.site_id, NEW.node_id, NEW.pool_id, NEW.slices, NEW.shares) THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('booking does not match atom %s', NEW.atom_id),
            'Bookings are written by compute.reserve; copy device, slices and shares from the atom.');
    END IF;
    IF NOT v_atom.valid @> NEW.during THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT',
            pg_catalog.format('atom %s is valid during %s, not during %s', NEW.atom_id, v_atom.valid, NEW.during),
            'The GPU''s layout changes within this window: book a window inside the atom''s validity.');
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER bookings_match_atom BEFORE INSERT OR UPDATE OF atom_id, during, state, slices, shares ON compute.bookings
    FOR EACH ROW EXECUTE FUNCTION compute.booking_matches_atom();

-- An atom's validity never shrinks away from under a live booking (layout changes check first;
-- this is the database's own guarantee).
CREATE FUNCTION compute.atom_keeps_its_bookings()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    v_blocking text;
BEGIN
    SELECT pg_catalog.string_agg(DISTINCT b.reservation_id::text, ', ') INTO v_blocking
      FROM compute.bookings AS b
     WHERE b.atom_id = OLD.atom_id AND b.state = 'held'
       AND (TG_OP = 'DELETE' OR NOT NEW.valid @> b.during);
    IF v_blocking IS NOT NULL THEN
        PERFORM compute.raise_error('CAPACITY_CONFLICT', pg_catalog.format('atom %s is booked outside its new validity', OLD.atom_id),
            pg_catalog.format('Release or wait for reservations %s first.', v_blocking));
    END IF;
    RETURN coalesce(NEW, OLD);
END
$$;
CREATE TRIGGER atoms_keep_bookings BEFORE UPDATE OF valid OR DELETE ON compute.atoms
    FOR EACH ROW EXECUTE FUNCTION compute.atom_keeps_its_bookings();
