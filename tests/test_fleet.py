"""Fleet as code (issue 17 part 2) against the real relay: tenant A's fleet applied from a file,
exported, applied to tenant B (empty) and exported again is the same document; plan shows a diff;
a second apply changes nothing; apply stops at the first refusal and says what it applied."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import yaml

from fleet import H200_MODEL
from iam_server import write_static_iam
from relay_support import running_relay, static_iam
from worker_support import register_webhook_key

CLI = [sys.executable, "-m", "better_compute.cli.main"]
TENANTS = {"a": ("tok-fleet-a-0123456789", "aaaaaaaa-0000-4000-8000-0000000000aa"),
           "b": ("tok-fleet-b-0123456789", "bbbbbbbb-0000-4000-8000-0000000000bb")}
FLEET = {
    "version": 1,
    "sites": [{"name": "dc1", "pools": [
        {"name": "h200", "gpu_model": H200_MODEL, "placement_policy": "spread",
         "offerings": [{"shape": "gpu", "max_count": 8, "max_duration_seconds": 86400},
                       {"shape": "mig:3g.71gb", "max_count": 16, "max_duration_seconds": 3600}],
         "quotas": [{"project": None, "max_atoms": 16}, {"project": "research", "max_atoms": 4, "gpu_hours_per_month": 100}],
         "layouts": []},
        {"name": "h200-b", "gpu_model": H200_MODEL, "placement_policy": "pack", "offerings": [], "quotas": [], "layouts": []}]}],
    "projects": [{"name": "research"}],
    "webhooks": [{"url": "https://hooks.example.com/bc", "event_types": ["reservation.activated"], "secret_env": "HOOK_SECRET"}],
}


def bc(tenant: str, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    token, tenant_id = TENANTS[tenant]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).parents[1] / "py"), "BETTER_COMPUTE_URL": url,
           "BETTER_COMPUTE_TOKEN": token, "BETTER_COMPUTE_TENANT": tenant_id, "HOOK_SECRET": "s" * 32}
    return subprocess.run([*CLI, "fleet", *args], env=env, capture_output=True, text=True, timeout=120, check=False)


def exported(tenant: str, url: str) -> dict:
    done = bc(tenant, url, "export")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def without_secrets(document: dict) -> dict:
    return {**document, "webhooks": [{k: v for k, v in hook.items() if k != "secret_env"} for hook in document["webhooks"]]}


def test_round_trip_plan_and_idempotent_apply(db_dsn: str, tmp_path: Path) -> None:
    iam = write_static_iam(tmp_path / "iam.toml", [
        (token, name, tenant_id, [{"effect": "allow", "actions": ["compute:*"], "resources": ["*"]}])
        for name, (token, tenant_id) in TENANTS.items()])
    source = tmp_path / "fleet.yaml"
    source.write_text(yaml.safe_dump(FLEET, sort_keys=False))
    with psycopg.connect(db_dsn, autocommit=True) as conn:
        register_webhook_key(conn)  # as a worker does when it starts: the relay seals webhook secrets to it
    with running_relay(db_dsn, static_iam(iam)) as relay:
        planned = bc("a", relay.url, "plan", "-f", str(source))
        assert planned.returncode == 0, planned.stderr
        assert "+ site dc1\n" in planned.stdout and "+ pool dc1/h200: NVIDIA H200, spread\n" in planned.stdout
        assert planned.stdout.rstrip().endswith("9 change(s) to apply")
        applied = bc("a", relay.url, "apply", "-f", str(source))
        assert applied.returncode == 0 and applied.stdout.rstrip().endswith("applied 9 change(s)"), applied.stderr
        first = exported("a", relay.url)
        assert first == without_secrets(FLEET)

        again = bc("a", relay.url, "apply", "-f", str(source))  # idempotent: nothing to do
        assert again.returncode == 0 and again.stdout.strip() == "No changes: the fleet is as the file says."

        copy = tmp_path / "export.yaml"
        copy.write_text(yaml.safe_dump({**first, "webhooks": [{**hook, "secret_env": "HOOK_SECRET"} for hook in first["webhooks"]]}))
        assert bc("b", relay.url, "apply", "-f", str(copy)).returncode == 0  # on tenant B's empty fleet
        assert exported("b", relay.url) == first

        changed = yaml.safe_load(source.read_text())
        pool = changed["sites"][0]["pools"][0]
        pool["placement_policy"] = "pack"
        pool["offerings"][0]["max_count"] = 4
        changed["sites"][0]["pools"][1]["gpu_model"] = "NVIDIA A100"  # a pool's model never changes: refused
        source.write_text(yaml.safe_dump(changed, sort_keys=False))
        diff = bc("a", relay.url, "plan", "-f", str(source)).stdout.splitlines()
        assert diff == ["~ pool dc1/h200: placement_policy \"spread\" -> \"pack\"",
                        "~ offering dc1/h200 gpu: max_count 8 -> 4",
                        "! pool dc1/h200-b: gpu_model NVIDIA H200 -> NVIDIA A100: a pool has one GPU model for life; make a new pool",
                        "2 change(s) to apply, 1 the API cannot make (!)"]
        stopped = bc("a", relay.url, "apply", "-f", str(source))
        assert stopped.returncode == 1
        assert stopped.stderr.splitlines()[0].startswith("applied 2 of 3 change(s); stopped at: ! pool dc1/h200-b")
        assert stopped.stderr.splitlines()[1].startswith("UNSUPPORTED: pool dc1/h200-b: gpu_model")
        after = exported("a", relay.url)["sites"][0]["pools"][0]
        assert (after["placement_policy"], after["offerings"][0]["max_count"]) == ("pack", 4)


def test_a_layout_the_api_cannot_change_is_a_refusal_in_the_plan() -> None:
    from better_compute.cli.fleet import plan

    pool = {"name": "h200", "gpu_model": H200_MODEL, "placement_policy": "pack", "offerings": [], "quotas": [],
            "layouts": [{"node": "node-a", "gpu": 0, "layout": "mig:3g.71gb@0,3g.71gb@4"}]}
    current = {"sites": [{"name": "dc1", "pools": [pool]}], "projects": [], "webhooks": [{"url": "https://old", "event_types": []}]}
    wanted = {"sites": [{"name": "dc1", "pools": [{**pool, "layouts": [{"node": "node-a", "gpu": 0, "layout": "timeslice:4"},
                                                                         {"node": "node-a", "gpu": 1, "layout": "whole"}]}]}],
              "projects": [], "webhooks": []}
    changes, left = plan(current, wanted)
    assert [change.line() for change in changes] == [
        "! layout dc1/h200 node-a GPU 0: mig:3g.71gb@0,3g.71gb@4 -> timeslice:4: an operator's change "
        "(ops.device_set_layout at psql); the API has no method for it"]
    assert changes[0].method is None and left == ["webhook https://old"]
