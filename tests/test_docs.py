"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml, the pages of docs/): a link to a page or
an anchor that does not exist, or a page missing from the nav, is a warning, and --strict makes it a failure."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_docs_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `test` extra of `make install` brings it)")
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()


def test_docs_site_fails_on_a_broken_anchor(tmp_path):
    """The check can fail: a copy of the pages with one link to an anchor no page has does not build."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (the `test` extra of `make install` brings it)")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    with open(tmp_path / "docs" / "index.md", "a") as f:
        f.write("\nSee [the exit codes](usage.md#no-such-section).\n")
    p = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0 and "no-such-section" in p.stdout + p.stderr


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MkDocs both spell it for plain headings (lower case, punctuation dropped)."""
    return re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def test_readme_links_resolve():
    """README.md is not part of the site: its links to the pages (and their anchors) are checked here."""
    text = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    bad = []
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path if path else ROOT / "README.md"
        if not target.is_file():
            bad.append(f"{link}: no such file")
        elif anchor and anchor not in {slug(h) for h in re.findall(r"^#+ (.*)$", target.read_text(), re.M)}:
            bad.append(f"{link}: no heading with that anchor")
    assert not bad, "README.md links that do not resolve:\n" + "\n".join(bad)
