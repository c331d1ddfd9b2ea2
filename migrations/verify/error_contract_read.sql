-- Verify better_compute:error_contract_read on pg

BEGIN;

SELECT 1 / (count(*) = (SELECT count(*) FROM compute.error_codes))::integer FROM api.error_contract();
SELECT 1 / (count(*) = (SELECT count(*) FROM compute.error_codes))::integer FROM node_api.error_contract();
SELECT 1 / (count(*) = (SELECT count(*) FROM compute.error_codes))::integer FROM worker_api.error_contract();
SELECT 1 / (count(*) = (SELECT count(*) FROM compute.error_codes))::integer FROM ops.error_contract();

ROLLBACK;
