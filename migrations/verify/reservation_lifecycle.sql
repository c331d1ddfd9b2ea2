-- Verify better_compute:reservation_lifecycle on pg

BEGIN;

SELECT 'compute.reserve(jsonb)'::regprocedure, 'compute.reservation_activate(uuid)'::regprocedure,
       'compute.reservation_release(uuid)'::regprocedure, 'compute.reservation_extend(uuid, timestamptz)'::regprocedure,
       'compute.reservation_void(uuid)'::regprocedure, 'compute.reservation_renew(uuid)'::regprocedure,
       'compute.reservations_expire()'::regprocedure, 'compute.reservation_document(uuid)'::regprocedure;

ROLLBACK;
