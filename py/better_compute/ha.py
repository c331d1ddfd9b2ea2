"""A highly available PostgreSQL on this machine: etcd and two Patroni members, a primary and a
synchronous standby, everything on 127.0.0.1 (`better-compute dev up --ha`, the failover test,
`make bench-ha`; docs/operations.md).

Patroni (PyPI `patroni`) runs each member's PostgreSQL 15 and keeps the leader key in etcd (Debian's
`etcd-server`). `synchronous_mode` makes a commit wait for the standby, and Patroni promotes only a
synchronous standby, so nothing acknowledged is lost by a failover. `primary_start_timeout: 0`: a
primary whose postmaster dies is failed over at once rather than restarted in place. Clients use a
multi-host DSN with `target_session_attrs=read-write`, which finds whichever member is the primary.

When we are root, etcd and Patroni run as the `postgres` user (PostgreSQL refuses root) in a folder
that user can reach (embedded.server_home). `ha.json` under the base folder says where, which ports
and which processes, so that `dev down --ha` stops them.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg import sql

from better_compute import embedded

STATE_FILE = "ha.json"
SCOPE = "better-compute"
MEMBERS = ("pg1", "pg2")
START_SECONDS = 120.0  # etcd up, both members bootstrapped and the standby synchronous
STOP_SECONDS = 30.0
TTL_SECONDS = 20  # the leader key's lifetime (Patroni's minimum): how long a vanished Patroni keeps it
LOOP_SECONDS = 1  # each Patroni's loop: a dead postmaster is seen within it


class HaError(RuntimeError):
    """The HA set could not be started, reached or stopped."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class HaSet:
    """Where one HA set lives, its ports and (while it runs) its processes."""

    base: Path
    home: Path
    etcd_port: int = 2379
    etcd_peer_port: int = 2380
    pg_ports: tuple[int, ...] = (5441, 5442)
    api_ports: tuple[int, ...] = (8008, 8009)
    dbname: str = "better_compute"
    pids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def at(cls, base: Path, *, any_ports: bool = False) -> HaSet:
        """The set recorded under `base`, or a new description of one (free ports when `any_ports`)."""
        base = base.resolve()
        state = base / STATE_FILE
        if state.exists():
            saved = json.loads(state.read_text())
            return cls(base=base, home=Path(saved["home"]), etcd_port=saved["etcd_port"],
                       etcd_peer_port=saved["etcd_peer_port"], pg_ports=tuple(saved["pg_ports"]),
                       api_ports=tuple(saved["api_ports"]), dbname=saved["dbname"], pids=saved["pids"])
        if any_ports:
            return cls(base=base, home=base, etcd_port=free_port(), etcd_peer_port=free_port(),
                       pg_ports=(free_port(), free_port()), api_ports=(free_port(), free_port()))
        return cls(base=base, home=base)

    # -- how to reach it ---------------------------------------------------------------------------

    @property
    def user(self) -> str:
        return embedded.server_user()

    def conninfo(self, dbname: str | None = None) -> str:
        """The multi-host DSN every process uses: it connects to whichever member is the primary."""
        hosts = ",".join("127.0.0.1" for _ in self.pg_ports)
        ports = ",".join(str(port) for port in self.pg_ports)
        return (f"host={hosts} port={ports} user={self.user} dbname={dbname or self.dbname} "
                "target_session_attrs=read-write connect_timeout=2")

    def member_conninfo(self, name: str, dbname: str | None = None) -> str:
        """One member's own DSN (whatever its role)."""
        return f"host=127.0.0.1 port={self.pg_ports[MEMBERS.index(name)]} user={self.user} dbname={dbname or self.dbname}"

    def api_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.api_ports[MEMBERS.index(name)]}"

    def config_path(self, name: str) -> Path:
        return self.home / f"{name}.yml"

    def datadir(self, name: str) -> Path:
        return self.home / name

    # -- life --------------------------------------------------------------------------------------

    def start(self) -> HaSet:
        """Start etcd and both members (bootstrapping them the first time); return the running set
        once there is a leader and a synchronous standby."""
        if self.running():
            return self
        ha = replace(self, home=embedded.server_home(self.base), pids={})
        for folder in (ha.home / "etcd", ha.home / "run"):
            folder.mkdir(parents=True, exist_ok=True)
            embedded.give_to_server_user(folder)
        pids = {"etcd": ha._spawn("etcd", ha._etcd_command())}
        for name in MEMBERS:
            path = ha.config_path(name)
            path.write_text(json.dumps(ha._patroni_config(name), indent=2) + "\n")  # JSON is YAML
            embedded.give_to_server_user(path)
            # -S: our packages only (PYTHONPATH), never the system's (Debian's pyOpenSSL breaks on our cryptography)
            pids[name] = ha._spawn(name, [patroni_python(), "-S", "-m", "patroni", str(path)])
        ha = replace(ha, pids=pids)
        ha._save()
        try:
            ha.wait_until(ha.healthy, START_SECONDS, "a leader and a synchronous standby")
        except BaseException:
            ha.stop()
            raise
        return ha

    def running(self) -> bool:
        return bool(self.pids) and all(_alive(pid) for pid in self.pids.values())

    def stop(self) -> None:
        """Stop both members (Patroni stops its PostgreSQL), then etcd. The data stays."""
        for name in (*MEMBERS, "etcd"):
            pid = self.pids.get(name)
            if pid is not None and _alive(pid):
                os.kill(pid, signal.SIGTERM)
                if not embedded.wait_for(lambda: not _alive(pid), STOP_SECONDS):
                    os.kill(pid, signal.SIGKILL)
        (self.base / STATE_FILE).unlink(missing_ok=True)

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def ensure_database(self) -> None:
        """Create the database on the primary if it does not exist (the standby follows)."""
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (self.dbname,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.dbname)))

    # -- what Patroni says and does ----------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view of the set (GET /cluster of the first member that answers)."""
        for name in MEMBERS:
            try:
                response = httpx.get(self.api_url(name) + "/cluster", timeout=2)
            except httpx.HTTPError:
                continue
            if response.status_code == 200:
                return list(response.json().get("members", []))
        return []

    def leader(self) -> str | None:
        """The member that is the running primary, if one is."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return str(member["name"])
        return None

    def healthy(self) -> bool:
        """A running leader and a streaming synchronous standby."""
        roles = {(member.get("role"), member.get("state")) for member in self.members()}
        return ("leader", "running") in roles and ("sync_standby", "streaming") in roles

    def switchover(self) -> str:
        """A planned switchover to the synchronous standby (Patroni's REST API); the new leader."""
        leader = self.leader()
        candidates = [m["name"] for m in self.members() if m.get("role") == "sync_standby"]
        if leader is None or not candidates:
            raise HaError(f"no switchover without a leader and a synchronous standby: {self.members()}")
        response = httpx.post(self.api_url(leader) + "/switchover", json={"leader": leader, "candidate": candidates[0]},
                              timeout=60)
        if response.status_code != 200:
            raise HaError(f"switchover refused ({response.status_code}): {response.text}")
        return str(candidates[0])

    def kill_primary(self) -> str:
        """kill -9 the primary's postmaster (Patroni lives on and fails over); the member killed."""
        leader = self.leader()
        if leader is None:
            raise HaError(f"no primary to kill: {self.members()}")
        pid = int((self.datadir(leader) / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
        return leader

    def wait_until(self, condition: Callable[[], bool], seconds: float, what: str) -> None:
        if not embedded.wait_for(condition, seconds):
            logs = "\n".join(f"--- {name}\n{self.log(name)[-1500:]}" for name in (*MEMBERS, "etcd"))
            raise HaError(f"timed out after {seconds:g} s waiting for {what}; members: {self.members()}\n{logs}")

    def log(self, name: str) -> str:
        path = self.home / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    # -- internals ---------------------------------------------------------------------------------

    def _save(self) -> None:
        state = asdict(self) | {"base": str(self.base), "home": str(self.home)}
        (self.base / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")

    def _spawn(self, name: str, argv: list[str]) -> int:
        """Start a daemon as the server user, detached (its own session), logging to home/name.log."""
        log_path = self.home / f"{name}.log"
        with log_path.open("ab") as log_file:
            embedded.give_to_server_user(log_path)
            user = embedded.server_user()
            entry = pwd.getpwnam(user)
            as_user: dict[str, Any] = ({"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
                                       if os.geteuid() == 0 else {})
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                                       cwd=self.home, start_new_session=True,
                                       env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home),
                                            "LC_ALL": "C.UTF-8", "PYTHONPATH": sysconfig.get_paths()["purelib"]},
                                       **as_user)
        return process.pid

    def _etcd_command(self) -> list[str]:
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer_port}"
        return [shutil.which("etcd") or "/usr/bin/etcd", "--name", "bc-etcd", "--data-dir", str(self.home / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"bc-etcd={peer}", "--initial-cluster-state", "new"]

    def _patroni_config(self, name: str) -> dict[str, Any]:
        port, api = self.pg_ports[MEMBERS.index(name)], self.api_ports[MEMBERS.index(name)]
        trust = ["local all all trust", "host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": SCOPE,
            "name": name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{api}", "connect_address": f"127.0.0.1:{api}"},
            "etcd3": {"hosts": f"127.0.0.1:{self.etcd_port}"},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL_SECONDS, "loop_wait": LOOP_SECONDS, "retry_timeout": 5,
                    "synchronous_mode": True,
                    "primary_start_timeout": 0,
                    "maximum_lag_on_failover": 0,
                    "postgresql": {"use_pg_rewind": True, "use_slots": True,
                                   "parameters": {"wal_log_hints": "on", "max_connections": 200}},
                },
                "initdb": [{"encoding": "UTF8"}, {"locale": "C.UTF-8"}],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{port}",
                "connect_address": f"127.0.0.1:{port}",
                "data_dir": str(self.datadir(name)),
                "bin_dir": str(embedded.pg_bindir()),
                "pgpass": str(self.home / f"{name}.pgpass"),
                "authentication": {"superuser": {"username": self.user},
                                   "replication": {"username": self.user},
                                   "rewind": {"username": self.user}},
                "parameters": {"unix_socket_directories": str(self.home / "run")},
                "pg_hba": trust,
            },
        }


def patroni_python() -> str:
    """A Python the server user may run, for Patroni (installed with our packages, on PYTHONPATH):
    ours, unless it lives where that user cannot go (a pyenv under /root); then the system's, the
    same minor version (Debian's python3)."""
    ours = str(Path(sys.executable).resolve())
    probe = subprocess.run(embedded.as_server_user(["test", "-x", ours]), check=False)
    if probe.returncode == 0:
        return sys.executable
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not Path(system).exists():
        raise HaError(f"the {embedded.server_user()} user cannot run {ours}, and there is no {system} "
                      "(apt-get install python3) to run Patroni with")
    return system


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


@contextmanager
def throwaway(base: Path) -> Iterator[HaSet]:
    """A new HA set under `base` on free ports, destroyed afterwards (tests, benchmarks)."""
    ha = HaSet.at(base, any_ports=True).start()
    try:
        yield ha
    finally:
        ha.destroy()
