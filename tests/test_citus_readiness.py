"""Ready for Citus (issue 18 part 4, docs/scale.md): the migrated schema's catalog against the plan in
tests/fixtures/citus/tables.toml, by Citus's rules (tests/citus_plan.py). Every table of ours is in
exactly one list; what breaks the rules today is exactly the plan's known exceptions (a new breach
fails, and so does an exception that no longer breaks anything: the list stays true). A scratch
schema shows the check flags a key, an index and a foreign key without site_id."""

from __future__ import annotations

import psycopg

from citus_plan import NO_COLUMN, Plan, breaches
from schema_catalog import OUR_SCHEMAS

SCRATCH = """
CREATE SCHEMA scratch;
CREATE TABLE scratch.sites (site_id uuid PRIMARY KEY);
CREATE TABLE scratch.nodes (
    node_id uuid, site_id uuid REFERENCES scratch.sites,
    name    text CONSTRAINT nodes_name_key UNIQUE,
    CONSTRAINT nodes_pkey PRIMARY KEY (node_id, site_id));
CREATE TABLE scratch.devices (
    device_id uuid CONSTRAINT devices_pkey PRIMARY KEY,
    site_id   uuid NOT NULL,
    node_id   uuid NOT NULL,
    CONSTRAINT devices_node_fkey FOREIGN KEY (node_id, site_id) REFERENCES scratch.nodes (node_id, site_id));
CREATE UNIQUE INDEX devices_by_node ON scratch.devices (node_id, device_id);
CREATE TABLE scratch.conditions (
    device_id uuid CONSTRAINT conditions_device_fkey REFERENCES scratch.devices,
    site_id   uuid NOT NULL);
CREATE TABLE scratch.flags (node_id uuid, flag text);
CREATE TABLE scratch.bookings (site_id uuid, device_id uuid, during tstzrange,
    CONSTRAINT bookings_exclusive EXCLUDE USING gist (site_id WITH =, device_id WITH =, during WITH &&),
    CONSTRAINT bookings_elsewhere EXCLUDE USING gist (site_id WITH <>, device_id WITH =, during WITH &&));
CREATE TABLE scratch.queue (node_id uuid, site_id uuid,
    CONSTRAINT queue_node_fkey FOREIGN KEY (node_id, site_id) REFERENCES scratch.nodes (node_id, site_id));
CREATE TABLE scratch.forgotten (id int);
"""


def test_the_schema_keeps_to_the_citus_plan(sql: psycopg.Connection) -> None:
    plan = Plan.read()
    found = breaches(sql, plan, list(OUR_SCHEMAS))
    tables = {table for (table,) in sql.execute(
        "SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname) FROM pg_catalog.pg_class AS c "
        "JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace WHERE n.nspname = ANY (%s) AND c.relkind IN ('r', 'p')",
        (list(OUR_SCHEMAS),))}
    assert set(plan.kinds) - tables == set(), "tables in the plan that the schema does not have"
    unexpected = {table: sorted(names - plan.exceptions.get(table, set())) for table, names in found.items()}
    assert {table: names for table, names in unexpected.items() if names} == {}, \
        "Citus's rules broken (docs/scale.md): fix the schema, or list the breach as a known exception with its reason and fix"
    stale = {table: sorted(names - found.get(table, set())) for table, names in plan.exceptions.items()}
    assert {table: names for table, names in stale.items() if names} == {}, \
        "known exceptions that are no longer breaches: take them out of tests/fixtures/citus/tables.toml"


def test_the_check_flags_keys_and_references_without_site_id(sql: psycopg.Connection) -> None:
    sql.execute(SCRATCH)
    plan = Plan({"scratch.sites": "reference", "scratch.nodes": "distributed", "scratch.devices": "distributed",
                 "scratch.conditions": "distributed", "scratch.flags": "distributed", "scratch.queue": "local",
                 "scratch.bookings": "distributed"},
                {})
    assert breaches(sql, plan, ["scratch"]) == {
        "scratch.nodes": {"nodes_name_key"},                  # a unique constraint without site_id
        "scratch.devices": {"devices_pkey", "devices_by_node"},  # a primary key, a unique index
        "scratch.conditions": {"conditions_device_fkey"},     # a reference to a distributed table not by site_id
        "scratch.flags": {NO_COLUMN},                         # no distribution column at all
        "scratch.queue": {"queue_node_fkey"},                 # a local table referencing a distributed one
        "scratch.bookings": {"bookings_elsewhere"},           # an exclusion constraint on site_id, not by =
        "scratch.forgotten": {"in no list"},
    }
