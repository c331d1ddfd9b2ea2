-- A node whose bcd reported HypervisorReady=False (no IOMMU, a GPU not bound to vfio) takes no new
-- VM: instances.create is a CAPACITY_CONFLICT and holds nothing; the instances it runs are left as they are.
BEGIN;
SELECT plan(3);

SELECT pgtap_fixtures.vps_pool(pgtap_fixtures.tenant('A'), 1, 2) AS pool \gset
SELECT pgtap_fixtures.node(:'pool', 1) AS node \gset
SELECT pgtap_fixtures.api('instances.create', pgtap_fixtures.tenant('A'), pgtap_fixtures.vps_input(:'pool', 1)) #>> '{data,instance_id}' AS running \gset
UPDATE compute.node_specs SET signed_generation = generation WHERE node_id = :'node';
SELECT compute.node_spec_observed(:'node', (SELECT generation FROM compute.node_specs WHERE node_id = :'node'),
                                  '[{"type": "HypervisorReady", "status": "False", "message": "IOMMU is off"}]');

SELECT is(pgtap_fixtures.refusal(format($$SELECT pgtap_fixtures.api('instances.create', %L, %L)$$, pgtap_fixtures.tenant('A'),
                                        pgtap_fixtures.vps_input(:'pool', 1))),
          'BC409: Its bcd reports HypervisorReady=False (ops.instances, the node''s conditions); try later, or ask an operator to cordon it.',
          'a new VM on the faulty host is a CAPACITY_CONFLICT');
SELECT is((SELECT count(*) FROM compute.instances), 1::bigint, 'nothing new is held');
SELECT is((SELECT state FROM compute.instances WHERE instance_id = :'running'), 'provisioning', 'the VM it has is left as it is');

SELECT * FROM finish();
ROLLBACK;
