"""A private PostgreSQL cluster on a unix socket: `better-compute dev up`, the test harness, pgTAP runs.

PostgreSQL refuses to run as root, so when we are root the server runs as the `postgres` user and
its files live where that user can reach them. The client side (psql, psycopg) stays with us.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psycopg
from psycopg import sql

SERVER_USER = "postgres"
SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; leave room for "/.s.PGSQL.NNNNN"
STATE_FILE = "cluster.json"


class ClusterError(RuntimeError):
    """The embedded cluster could not be created, started or stopped."""


def pg_bindir() -> Path:
    """The directory of the PostgreSQL server binaries (pg_config, else Debian's layout, else PATH)."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if out.returncode == 0 and (Path(out.stdout.strip()) / "pg_ctl").exists():
            return Path(out.stdout.strip())
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "pg_ctl").exists():
            return candidate
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    raise ClusterError("PostgreSQL server binaries not found: install postgresql-15 (apt-get install postgresql-15)")


def _running_as_root() -> bool:
    return os.geteuid() == 0


def as_server_user(argv: list[str]) -> list[str]:
    """Prefix a command so that it runs as the server's user when we are root."""
    return ["runuser", "-u", SERVER_USER, "--", *argv] if _running_as_root() else argv


def _server_user_can_use(path: Path) -> bool:
    probe = subprocess.run(as_server_user(["test", "-w", str(path), "-a", "-x", str(path)]), check=False)
    return probe.returncode == 0


def give_to_server_user(path: Path) -> None:
    """Make `path` the server user's (when we are root; else it is ours already)."""
    if _running_as_root():
        entry = pwd.getpwnam(SERVER_USER)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass(frozen=True)
class Cluster:
    """Where one embedded cluster lives and how to reach it."""

    base: Path  # what the user named (e.g. ./.bc); holds cluster.json
    home: Path  # data/ and run/ live here (base itself unless the server user cannot reach it)
    port: int = 5432
    dbname: str = "better_compute"
    tcp: bool = False

    @property
    def datadir(self) -> Path:
        return self.home / "data"

    @property
    def socketdir(self) -> Path:
        return self.home / "run"

    @property
    def logfile(self) -> Path:
        return self.home / "server.log"

    @property
    def user(self) -> str:
        return server_user()

    def conninfo(self, dbname: str | None = None) -> str:
        host = "127.0.0.1" if self.tcp else str(self.socketdir)
        return f"host={host} port={self.port} user={self.user} dbname={dbname or self.dbname}"

    def url(self, dbname: str | None = None) -> str:
        host = "127.0.0.1" if self.tcp else str(self.socketdir)
        return f"postgresql://{self.user}@/{dbname or self.dbname}?host={host}&port={self.port}"

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    def at(cls, base: Path, *, port: int = 5432, dbname: str = "better_compute", tcp: bool = False) -> Cluster:
        """The cluster recorded under `base`, or a new description of one (nothing is created)."""
        base = base.resolve()
        state = base / STATE_FILE
        if state.exists():
            saved = json.loads(state.read_text())
            return cls(base=base, home=Path(saved["home"]), port=saved["port"], dbname=saved["dbname"], tcp=saved["tcp"])
        return cls(base=base, home=base, port=port, dbname=dbname, tcp=tcp)

    def _choose_home(self) -> Cluster:
        home = server_home(self.base)
        return self if home == self.base else Cluster(base=self.base, home=home, port=self.port, dbname=self.dbname,
                                                      tcp=self.tcp)

    def init(self) -> Cluster:
        """Create the data directory if it does not exist yet; return the cluster with its final home."""
        cluster = self._choose_home()
        (cluster.base / STATE_FILE).write_text(json.dumps(asdict(cluster), default=str, indent=2) + "\n")
        if (cluster.datadir / "PG_VERSION").exists():
            return cluster
        for directory in (cluster.home, cluster.socketdir):
            directory.mkdir(parents=True, exist_ok=True)
            give_to_server_user(directory)
        initdb = [str(pg_bindir() / "initdb"), "-D", str(cluster.datadir), "-A", "trust", "-U", cluster.user,
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]
        _run(as_server_user(initdb), "initdb")
        return cluster

    def _postmaster_alive(self) -> bool:
        """Whether the pid in postmaster.pid is a live postgres process (not gone, not a zombie)."""
        try:
            pid = int((self.datadir / "postmaster.pid").read_text().split()[0])
            proc = Path(f"/proc/{pid}")
            name = (proc / "comm").read_text().strip()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ValueError, IndexError):
            return False
        return name in ("postgres", "postmaster") and state not in ("Z", "X")

    def accepts_connections(self) -> bool:
        try:
            psycopg.connect(self.conninfo("postgres"), connect_timeout=2).close()
        except psycopg.OperationalError:
            return False
        return True

    def is_running(self) -> bool:
        return self._postmaster_alive() and self.accepts_connections()

    def start(self, *, fsync: bool = False) -> None:
        """Start the server unless it runs; a pid file left by a crash is removed first. `fsync`: flush
        every commit to disk, as production does (benchmarks of committing need it)."""
        if self._postmaster_alive():
            if wait_for(self.accepts_connections, seconds=30):
                return
            raise ClusterError(f"a postmaster holds {self.datadir} but accepts no connections; see {self.logfile}")
        for stale in (self.datadir / "postmaster.pid", self.socketdir / f".s.PGSQL.{self.port}.lock"):
            stale.unlink(missing_ok=True)
        listen = "127.0.0.1" if self.tcp else ""
        # fsync=off: a killed server loses nothing (the OS still has the pages), only a host crash could.
        options = f"-k {self.socketdir} -p {self.port} -c listen_addresses='{listen}' -c fsync={'on' if fsync else 'off'}"
        pg_ctl = [str(pg_bindir() / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.datadir),
                  "-l", str(self.logfile), "-o", options]
        _run(as_server_user(pg_ctl), "pg_ctl start", log=self.logfile)

    def stop(self) -> None:
        if self._postmaster_alive():
            pg_ctl = [str(pg_bindir() / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.datadir)]
            _run(as_server_user(pg_ctl), "pg_ctl stop")

    def destroy(self) -> None:
        """Stop the server and delete its files (used for throwaway test clusters)."""
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)

    def ensure_database(self, dbname: str | None = None) -> None:
        """Create the database if it does not exist."""
        name = dbname or self.dbname
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
            if not exists:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def server_home(base: Path) -> Path:
    """Where the server user keeps data for `base`: base itself when it can reach it (and a socket
    path under it fits), else a private dir it can reach, named after base."""
    base.mkdir(parents=True, exist_ok=True)
    reachable = not _running_as_root() or _server_user_can_reach_after_chown(base)
    if reachable and len(str(base / "run")) <= SOCKET_PATH_MAX:
        return base
    digest = hashlib.sha256(str(base).encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"better-compute-{digest}"
    home.mkdir(mode=0o755, exist_ok=True)
    give_to_server_user(home)
    return home


def server_user() -> str:
    """Who runs the server (and is its superuser): `postgres` when we are root, else we."""
    return SERVER_USER if _running_as_root() else pwd.getpwuid(os.geteuid()).pw_name


def _server_user_can_reach_after_chown(base: Path) -> bool:
    give_to_server_user(base)
    return _server_user_can_use(base)


def throwaway(prefix: str = "bc-test-") -> Cluster:
    """A new cluster in a fresh temp dir that the server user can enter; the caller destroys it."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    base.chmod(0o755)
    return Cluster.at(base).init()


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    """Poll `condition` every 0.2 s for up to `seconds`; whether it came true."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _run(argv: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = log.read_text()[-2000:] if log and log.exists() else ""
        raise ClusterError(f"{what} failed ({done.returncode}): {done.stderr.strip()}\n{tail}".strip())
