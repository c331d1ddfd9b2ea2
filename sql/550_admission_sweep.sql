-- The worker voids admissions whose relay died between prepare and admit (and prunes old ones).
SET LOCAL ROLE bc_owner;

INSERT INTO compute.work_periodic (kind, every) VALUES ('admissions.expire', interval '5 seconds');

CREATE FUNCTION worker_api.admissions_expire() RETURNS integer
LANGUAGE sql SECURITY DEFINER SET search_path = '' AS $$ SELECT compute.admissions_expire() $$;
COMMENT ON FUNCTION worker_api.admissions_expire() IS 'Sweep: end admissions never admitted within admission_seconds.';
