"""A real PostgreSQL for the tests: the local server of ``scripts/postgres-local.sh`` and one fresh database per test.

``postgres_server`` (session): the server's URL (``postgresql+psycopg://fedcli:<password>@127.0.0.1:<port>/fedcli``),
read with the script's ``url``; where the server is not running, ``up --no-install`` starts it (a test never installs
packages: CI's ``.ci/run`` runs ``up`` first, which installs Debian's ``postgresql`` where it is missing). Where it
cannot start, or psycopg (``make install``'s ``postgres`` extra) is missing, the test skips with the reason, unless
``FEDCLI_REQUIRE_POSTGRES=1`` (CI), where that is a failure.

``postgres_url`` (per test): a new database ``fedcli_test_<random>`` owned by the role fedcli, its URL, dropped after
the test (``WITH (FORCE)``: a worker the test left connected does not keep it). The fixtures are registered by
tests/conftest.py.
"""

import os
import secrets
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "postgres-local.sh"
DRIVER = "postgresql+psycopg://"


def state_dir() -> Path:
    """The script's folder (data, log, the 0600 password file): FEDCLI_POSTGRES_DIR, else its default."""
    if os.environ.get("FEDCLI_POSTGRES_DIR"):
        return Path(os.environ["FEDCLI_POSTGRES_DIR"])
    import getpass

    return Path("/var/tmp/fedcli-postgres" if os.getuid() == 0 else f"/var/tmp/fedcli-postgres-{getpass.getuser()}")


def files_holding(root: Path, secret: str) -> list[Path]:
    """The files under ``root`` whose bytes contain ``secret`` (files that vanish meanwhile are passed over: other
    tests create and drop databases)."""
    needle, found = secret.encode(), []
    for path in sorted(p for p in root.rglob("*") if not p.is_symlink()):
        try:
            if path.is_file() and needle in path.read_bytes():
                found.append(path)
        except FileNotFoundError:
            continue
    return found


def postgres_required() -> bool:
    """``FEDCLI_REQUIRE_POSTGRES`` set (CI, ``.ci/run``): a test that cannot reach the server fails, not skips."""
    return os.environ.get("FEDCLI_REQUIRE_POSTGRES", "").lower() not in ("", "0", "false", "no")


def script(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """``scripts/postgres-local.sh ARGS`` (its output captured, text)."""
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


def local_url() -> tuple[str | None, str]:
    """(the local server's full URL, "") or (None, why not): ``url``, after ``up --no-install`` when it is not up."""
    if not SCRIPT.exists():
        return None, f"{SCRIPT.name} not found"
    got = script("url")
    if got.returncode != 0:
        started = script("up", "--no-install")
        if started.returncode != 0:
            return None, (started.stderr.strip().splitlines() or [f"exit {started.returncode}"])[-1]
        got = script("url")
    url = got.stdout.strip()
    if got.returncode != 0 or not url.startswith(DRIVER):
        return None, (got.stderr.strip().splitlines() or [f"`url` printed {len(url)} characters"])[-1]
    return url, ""


def libpq(url: str) -> str:
    """The URL as psycopg itself takes it (SQLAlchemy's ``+psycopg`` dialect name dropped)."""
    return "postgresql://" + url.removeprefix(DRIVER)


def with_database(url: str, name: str) -> str:
    """``url`` with its database (the last path segment) replaced by ``name``."""
    return url.rsplit("/", 1)[0] + "/" + name


@pytest.fixture(scope="session")
def postgres_server() -> str:
    why = ""
    try:
        import psycopg
    except ImportError:
        why = "psycopg is not installed (`make install` installs it: the postgres extra)"
    url = None
    if not why:
        url, why = local_url()
    if url is None:
        if postgres_required():
            pytest.fail(f"FEDCLI_REQUIRE_POSTGRES is set but the local PostgreSQL cannot be reached: {why}")
        pytest.skip(f"no local PostgreSQL ({why}); start one with `sudo scripts/postgres-local.sh up`")
    return url


@pytest.fixture
def postgres_url(postgres_server) -> str:
    import psycopg

    name = f"fedcli_test_{secrets.token_hex(6)}"
    with psycopg.connect(libpq(postgres_server), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(postgres_server, name)
    finally:
        with psycopg.connect(libpq(postgres_server), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
