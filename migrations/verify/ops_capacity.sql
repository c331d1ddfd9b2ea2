-- Verify better_compute:ops_capacity on pg

BEGIN;

SELECT node_id, name, flags, drain FROM ops.nodes WHERE false;
SELECT pool, shape, total, bookable, held_now, held_future, cordoned FROM ops.pool_capacity WHERE false;
SELECT atom_id, holder_reservation, next_reservation FROM ops.atom_holders WHERE false;
SELECT 'ops.node_cordon(text, text)'::regprocedure, 'ops.node_drain(text, text)'::regprocedure,
       'ops.node_quarantine(text, text)'::regprocedure, 'ops.node_clear(text, text)'::regprocedure;

ROLLBACK;
