"""A throwaway PostgreSQL cluster for the tests: real server binaries (Debian's `postgresql` package, which
.ci/run installs), a cluster in a temporary folder, stopped and deleted afterwards. No mock database.

`initdb` and `pg_ctl` refuse to run as root, so as root they run as the `postgres` user (runuser), in a
folder that user owns.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _bindir() -> Path | None:
    """`pg_config --bindir`, else the newest of Debian's /usr/lib/postgresql/N/bin."""
    try:
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout
        candidates = [Path(out.strip())]
    except (OSError, subprocess.CalledProcessError):
        candidates = []
    found = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(
        found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0, reverse=True
    )
    return next((c for c in candidates if (c / "initdb").exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, bindir: Path, root: Path, port: int):
        self.bindir, self.root, self.port = bindir, root, port
        self.data = root / "data"
        self.as_postgres = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        if self.as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")

    def start(self, init: bool = True) -> None:
        """Start the server; with `init`, create the cluster first (a start after `stop` passes False and
        finds the data as it was)."""
        if init:
            if self.as_postgres:
                shutil.chown(self.root, "postgres")
            self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "lazymem", "--no-sync")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        """Stop the server at once, as a crash would (`start` recovers)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def restart(self) -> None:
        """A crash and a start: every connection is dropped, the data stays."""
        self.stop()
        self.start(init=False)

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The server hung, not gone: the postmaster and every process it started stopped by SIGSTOP (its
        sockets stay open, and the kernel still acknowledges what clients send), continued by SIGCONT on
        leaving, whatever happens inside."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        pids = [postmaster, *_children(postmaster)]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    def dsn(self, db: str = "postgres") -> str:
        return f"postgresql://lazymem@127.0.0.1:{self.port}/{db}"

    def new_database(self) -> str:
        """A fresh, empty database of this cluster; its DSN."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def files_containing(self, needle: bytes) -> list[Path]:
        """The cluster's table files (base/) holding `needle`; WAL (pg_wal/) is not searched."""
        found = []
        for path in (self.data / "base").rglob("*"):
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        return found


def _children(parent: int) -> list[int]:
    """The processes whose parent is `parent` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[1]) == parent:
            found.append(int(stat.parent.name))
    return found


@contextmanager
def new_cluster() -> Iterator[Cluster]:
    """A started throwaway cluster, stopped (if it still runs) and deleted afterwards. It lives in a new
    folder of the system's temporary directory: as root the server runs as `postgres`, which could not
    reach a folder under pytest's tmp_path (its parents are private to root)."""
    bindir = _bindir()
    if bindir is None:
        message = "PostgreSQL server binaries not found (apt-get install postgresql; .ci/run does it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="lazymem-pg-"))
    cluster = Cluster(bindir, root, _free_port())
    cluster.start()
    try:
        yield cluster
    finally:
        if (cluster.data / "postmaster.pid").exists():
            cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Cluster]:
    """One cluster for the whole run (each test takes its own database: `pg_dsn`)."""
    with new_cluster() as cluster:
        yield cluster


@pytest.fixture
def own_postgres() -> Iterator[Cluster]:
    """A cluster of the test's own, which it may `stop` and `start(init=False)` again (an outage, a
    restart)."""
    with new_cluster() as cluster:
        yield cluster


@pytest.fixture
def pg_dsn(postgres: Cluster) -> str:
    """A new empty database per test."""
    return postgres.new_database()
