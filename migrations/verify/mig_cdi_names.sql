-- Verify better_compute:mig_cdi_names on pg

BEGIN;

SELECT 1 / (compute.mig_cdi_device('MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0')
            = 'MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f-gi7-ci0')::integer;
SELECT 1 / (compute.mig_cdi_device('MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde') = 'MIG-7089d0f3-293f-58c9-8f8c-5ea666eedbde')::integer;
SELECT 1 / (compute.mig_cdi_device('0:4') IS NULL)::integer;
SELECT 1 / (compute.inventory_layout('{"mig": {"mode": "enabled", "instances": [
    {"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 0}, {"profile": "3g.71gb", "placement": 4, "gi": 2, "ci": 1}]}}')
            = 'mig:3g.71gb@4')::integer;
SELECT 1 / (compute.atom_cdi_name('00000000-0000-0000-0000-000000000000') IS NULL)::integer;

ROLLBACK;
