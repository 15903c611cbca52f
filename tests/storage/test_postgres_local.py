"""``scripts/postgres-local.sh`` itself, on the real local server (tests/pgkit.py): ``up`` again only checks it (and
returns at once: the server once inherited the script's lock and held it for its lifetime, so that a second ``up``
waited 300 s and failed); the URL is printed masked except by ``url``; the password file is 0600; a second server (its
own FEDCLI_POSTGRES_DIR) whose port is taken chooses the next free one, and ``down`` stops it. And the fixtures: a
server that cannot start skips a test, or fails it under FEDCLI_REQUIRE_POSTGRES=1.
"""

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pgkit import SCRIPT, libpq, script, state_dir

TESTS = Path(__file__).resolve().parents[1]
URL = re.compile(r"postgresql\+psycopg://fedcli:([0-9a-f]{32})@127\.0\.0\.1:(\d+)/fedcli")


def env_with(**extra) -> dict:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("FEDCLI_POSTGRES", "FEDCLI_REQUIRE_POSTGRES")) and k != "PG_BINDIR"
    } | extra


@pytest.mark.timeout(120)
def test_up_again_only_checks_and_shows_the_url_masked(postgres_server):
    password, port = URL.fullmatch(postgres_server).groups()
    t0 = time.monotonic()
    again = script("up", "--no-install", timeout=100)
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - t0 < 30
    assert f"postgres-local: up: postgresql+psycopg://fedcli:***@127.0.0.1:{port}/fedcli" in again.stdout
    status = script("status")
    assert status.returncode == 0 and f"fedcli:***@127.0.0.1:{port}/fedcli" in status.stdout
    for out in (again.stdout, again.stderr, status.stdout, status.stderr):
        assert password not in out
    assert script("url").stdout.strip() == postgres_server  # the same password and port as before
    secret = state_dir() / "password"
    assert secret.read_text() == password and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert (state_dir() / "port").read_text().strip() == port


@pytest.mark.timeout(240)
def test_a_second_server_takes_the_next_free_port_and_down_stops_it(postgres_server):
    import psycopg

    taken = int(URL.fullmatch(postgres_server).group(2))
    home = Path(tempfile.mkdtemp(prefix="fedcli-pgtest-", dir="/var/tmp"))
    home.chmod(0o755)  # as root, the server runs as `postgres`, which must reach its folder
    env = env_with(FEDCLI_POSTGRES_DIR=str(home), FEDCLI_POSTGRES_PORT=str(taken))
    run = lambda *a, t=200: subprocess.run([str(SCRIPT), *a], env=env, capture_output=True, text=True, timeout=t)  # noqa: E731
    try:
        up = run("up", "--no-install")
        assert up.returncode == 0, up.stdout + up.stderr
        assert run("up", "--no-install", t=30).returncode == 0  # at once: the server does not hold the lock
        url = run("url").stdout.strip()
        password, port = URL.fullmatch(url).groups()
        assert int(port) > taken and password != URL.fullmatch(postgres_server).group(1)
        assert (home / "port").read_text().strip() == port
        with psycopg.connect(libpq(url)) as conn:
            assert conn.execute("SELECT inet_server_port(), current_user, current_database()").fetchone() == (
                int(port),
                "fedcli",
                "fedcli",
            )
        down = run("down")
        assert down.returncode == 0 and "postgres-local: down" in down.stdout
        for cmd in ("status", "url"):
            gone = run(cmd)
            assert gone.returncode == 3 and gone.stdout == "" and "not running" in gone.stderr
    finally:
        run("down", t=60)
        shutil.rmtree(home)


NEEDS_IT = """
def test_needs_postgres(postgres_url):
    pass
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("require,code,outcome", [("", 0, "1 skipped"), ("1", 1, "1 error")])
def test_a_server_that_cannot_start_skips_or_fails_where_required(tmp_path, require, code, outcome):
    (tmp_path / "test_x.py").write_text(NEEDS_IT)
    env = env_with(
        FEDCLI_POSTGRES_DIR=str(tmp_path / "pg"),
        PG_BINDIR=str(tmp_path / "no-postgres"),
        FEDCLI_REQUIRE_POSTGRES=require,
        PYTHONPATH=str(TESTS),
    )
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "pgkit",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_x.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert p.returncode == code, p.stdout + p.stderr
    assert outcome in p.stdout and "PostgreSQL is not installed" in p.stdout, p.stdout
    if require:
        assert "FEDCLI_REQUIRE_POSTGRES is set but the local PostgreSQL cannot be reached" in p.stdout
