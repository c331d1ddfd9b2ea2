-- Deploy better_compute:offerings_quotas to pg
-- Snapshot of sql/140_offerings_quotas.sql when this change was planned.

BEGIN;

-- What a tenant may ask a pool for (offerings) and how much of it (quotas).
--   offering  a shape (gpu | mig:<profile> | slot) and instance kind a pool offers, with limits
--   quota     per tenant (optionally per project) and pool: concurrent atoms, GPU-hours per calendar
--             month (UTC). A GPU-hour is one whole GPU for an hour; a MIG instance counts its share
--             of the GPU's 8 memory slices, a time-slice slot 1/N. Future bookings count when made.
SET LOCAL ROLE bc_owner;

CREATE TABLE compute.offerings (
    offering_id   uuid PRIMARY KEY,
    pool_id       uuid NOT NULL REFERENCES compute.pools,
    shape         text NOT NULL CHECK (shape ~ '^(gpu|slot|mig:[0-9]+g\.[0-9]+gb(\+me)?)$'),
    instance_kind text NOT NULL DEFAULT 'devices' CHECK (instance_kind IN ('devices', 'bare_metal', 'vps')),
    max_count     integer NOT NULL CHECK (max_count > 0),
    max_duration  interval NOT NULL CHECK (max_duration > interval '0'),
    created_at    timestamptz NOT NULL,
    UNIQUE (pool_id, shape, instance_kind)
);
COMMENT ON TABLE compute.offerings IS 'What a tenant may ask a pool for: shape, instance kind, max count and max duration.';

CREATE TABLE compute.quotas (
    quota_id            uuid PRIMARY KEY,
    tenant_id           uuid NOT NULL REFERENCES compute.tenants,
    project_id          uuid,
    pool_id             uuid NOT NULL REFERENCES compute.pools,
    max_atoms           integer CHECK (max_atoms >= 0),
    gpu_hours_per_month numeric CHECK (gpu_hours_per_month >= 0),
    updated_at          timestamptz NOT NULL,
    FOREIGN KEY (project_id, tenant_id) REFERENCES compute.projects (project_id, tenant_id),
    UNIQUE NULLS NOT DISTINCT (tenant_id, project_id, pool_id)
);
COMMENT ON TABLE compute.quotas IS 'Per tenant (project NULL) or project, per pool: max concurrent atoms and GPU-hours per calendar month; NULL = unlimited.';

CREATE FUNCTION compute.offering_create(p_pool_id uuid, p_shape text, p_max_count integer, p_max_duration interval,
                                        p_instance_kind text DEFAULT 'devices')
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_offering_id uuid;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Create the pool first.');
    END IF;
    IF p_shape IS NULL OR p_shape !~ '^(gpu|slot|mig:[0-9]+g\.[0-9]+gb(\+me)?)$' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid shape %L', p_shape),
            'Use gpu, slot or mig:<profile> (e.g. mig:3g.71gb).');
    END IF;
    IF p_max_count IS NULL OR p_max_count < 1 OR p_max_count > compute.limit('atoms_per_reservation') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_count %s is out of range', p_max_count),
            pg_catalog.format('Use 1 to %s (limit atoms_per_reservation).', compute.limit('atoms_per_reservation')));
    END IF;
    IF p_max_duration IS NULL OR p_max_duration <= interval '0'
       OR p_max_duration > compute.limit('reservation_window_seconds') * interval '1 second' THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('max_duration %s is out of range', p_max_duration),
            pg_catalog.format('Use a positive interval up to %s seconds (limit reservation_window_seconds).',
                              compute.limit('reservation_window_seconds')));
    END IF;
    IF p_instance_kind IS NULL OR p_instance_kind NOT IN ('devices', 'bare_metal', 'vps') THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', pg_catalog.format('invalid instance kind %L', p_instance_kind),
            'Use devices, bare_metal or vps.');
    END IF;
    INSERT INTO compute.offerings AS o (offering_id, pool_id, shape, instance_kind, max_count, max_duration, created_at)
    VALUES (pg_catalog.gen_random_uuid(), p_pool_id, p_shape, p_instance_kind, p_max_count, p_max_duration, compute.compute_now())
    ON CONFLICT (pool_id, shape, instance_kind)
        DO UPDATE SET max_count = EXCLUDED.max_count, max_duration = EXCLUDED.max_duration
    RETURNING o.offering_id INTO v_offering_id;
    RETURN v_offering_id;
END
$$;
COMMENT ON FUNCTION compute.offering_create(uuid, text, integer, interval, text) IS 'Offer a shape in a pool (or change the limits of the offer).';

CREATE FUNCTION compute.quota_set(p_tenant_id uuid, p_project_id uuid, p_pool_id uuid, p_max_atoms integer,
                                  p_gpu_hours_per_month numeric)
RETURNS uuid
LANGUAGE plpgsql
AS $$
DECLARE
    v_quota_id uuid;
BEGIN
    PERFORM compute.tenant_ensure(p_tenant_id);
    IF NOT EXISTS (SELECT 1 FROM compute.pools AS p WHERE p.pool_id = p_pool_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no pool %s', p_pool_id), 'Create the pool first.');
    END IF;
    IF p_project_id IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM compute.projects AS p WHERE p.project_id = p_project_id AND p.tenant_id = p_tenant_id) THEN
        PERFORM compute.raise_error('NOT_FOUND', pg_catalog.format('no project %s in tenant %s', p_project_id, p_tenant_id),
            'Create the project in that tenant first.');
    END IF;
    IF p_max_atoms < 0 OR p_gpu_hours_per_month < 0 THEN
        PERFORM compute.raise_error('INVALID_ARGUMENT', 'a quota cannot be negative', 'Use 0 to forbid, NULL for no limit.');
    END IF;
    INSERT INTO compute.quotas AS q (quota_id, tenant_id, project_id, pool_id, max_atoms, gpu_hours_per_month, updated_at)
    VALUES (pg_catalog.gen_random_uuid(), p_tenant_id, p_project_id, p_pool_id, p_max_atoms, p_gpu_hours_per_month,
            compute.compute_now())
    ON CONFLICT (tenant_id, project_id, pool_id) DO UPDATE
        SET max_atoms = EXCLUDED.max_atoms, gpu_hours_per_month = EXCLUDED.gpu_hours_per_month, updated_at = EXCLUDED.updated_at
    RETURNING q.quota_id INTO v_quota_id;
    RETURN v_quota_id;
END
$$;
COMMENT ON FUNCTION compute.quota_set(uuid, uuid, uuid, integer, numeric) IS 'Set a tenant''s (or project''s) quota in a pool; NULL = unlimited.';

COMMIT;
