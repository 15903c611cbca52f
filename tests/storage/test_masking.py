"""fedcli.results.masking.masked, the one password masker of lock files, tune.json, manifests and printed lines
(docs/tuning.md: "The password is masked (``user:***@host``)"): every URL's password in a string, worked by hand."""

import json
import sys

import pytest

from fedcli.results.masking import masked


def test_every_password_of_a_command_line_masked_by_hand():
    """Three URLs and a bare user:password@host on one line; a password with ':' and a percent-encoded '@' (%40) in
    it; a URL without password, one without user, a SQLite path: only the four passwords become ***."""
    line = (
        "fedcli tune r.toml --storage postgresql+psycopg://ann:s3cr3t@db:5432/t "
        "--other mysql://bo:p:w%40x@h2/d ann:pw@h3 "
        "postgresql://cy@h4/db postgresql://h5:5432/db sqlite:////tmp/o.sqlite3 http://:only@h6"
    )
    assert masked(line) == (
        "fedcli tune r.toml --storage postgresql+psycopg://ann:***@db:5432/t "
        "--other mysql://bo:***@h2/d ann:***@h3 "
        "postgresql://cy@h4/db postgresql://h5:5432/db sqlite:////tmp/o.sqlite3 http://:***@h6"
    )


def test_single_urls_and_bare_ones():
    """One URL, as tune.json and the printed lines hold it; a bare user:password@host (the tune's refusal quotes it);
    strings without a password unchanged."""
    assert masked("postgresql+psycopg://ann:s3cr3t@db.example:5432/tune") == (
        "postgresql+psycopg://ann:***@db.example:5432/tune"
    )
    assert masked("ann:s3cr3t@nowhere") == "ann:***@nowhere"
    assert masked("--storage=ann:a:b@h:5432/db") == "--storage=ann:***@h:5432/db"
    for same in ("postgresql://ann@h/db", "journal", "a:b", "user@host", "postgresql://h:5432/db", ""):
        assert masked(same) == same


@pytest.mark.parametrize(
    "argv,command",
    [
        (
            ["fedcli", "tune", "r.toml", "--storage", "postgresql+psycopg://ann:s3cr3t@db:5432/t"],
            "fedcli tune r.toml --storage postgresql+psycopg://ann:***@db:5432/t",
        ),
        (
            ["fedcli", "tune", "--storage", "ann:pw1@db", "--x", "postgresql://bo:pw2@h/d", "mysql://cy:pw3@h/d"],
            "fedcli tune --storage ann:***@db --x postgresql://bo:***@h/d mysql://cy:***@h/d",
        ),
    ],
)
def test_a_lock_file_names_its_holder_with_the_password_masked(tmp_path, monkeypatch, argv, command):
    """tune.lock names the command holding it (for the message that refuses a second one): a database password on
    that command line is written as ***, a bare user:password@host's and every URL's (the same masker)."""
    from fedcli.results.lock import FileLock

    monkeypatch.setattr(sys, "argv", argv)
    lock = FileLock(tmp_path / "tune.lock")
    assert lock.acquire()
    try:
        held = json.loads((tmp_path / "tune.lock").read_text())
    finally:
        lock.release()
    assert held["command"] == command
