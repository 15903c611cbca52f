"""Issue 56, items 5 and 6: ``fedcli report`` writes into the folder the user named through descriptors, never through
a link, whenever the link was planted.

Item 5: the checks before the first write (``--paper`` checks every path first) leave a window of the whole drawing
(about a second): a link planted in it at ``OUT/figures`` (or a run's ``figures/``) must not get a single byte written
through it. The link is planted for real, in the middle of the command: right after its first figure file is written
(``Figure.savefig`` wrapped), the figures folder is moved aside and a link to an outside folder put in its place.

Item 6: the folder the user names (``--paper --output``, ``--figures``, the folder of ``--output FILE``) may itself be a
link, as ``train --out`` may (docs/reliability.md): that is the user's choice of place."""

import os
from pathlib import Path

import pytest

from fedcli.cli.main import main
from simkit import cli
from sweepkit import RECIPE as SWEEP_RECIPE

RECIPE = (
    SWEEP_RECIPE.replace('paper = "a test"', 'paper = "FedLAMA AAAI 2023, Table 3 (a test\'s digits stand-in)"')
    + """
[[figures]]
name = "t3-curves"
kind = "curves"
runs = ["FedAvg x1", "FedLAMA phi=2"]

[[figures]]
name = "t3-more"
kind = "curves"
x = "params"
runs = ["FedAvg x1", "FedLAMA phi=2"]
"""
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("race")
    (root / "t3.toml").write_text(RECIPE)
    assert main(
        [
            "sweep",
            str(root / "t3.toml"),
            "--scale",
            "smoke",
            "--seeds",
            "1",
            "--out",
            str(root / "results" / "t3"),
            "--quiet",
            "--in-process",  # the report is the point, not the trainings' processes
        ]
    ) in (0, None)
    return root / "results"


def tree(root: Path) -> dict:
    """Every path under ``root`` (links not followed): a link's target, a file's bytes, a folder's None."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            found[str(p.relative_to(root))] = (
                os.readlink(p) if p.is_symlink() else None if p.is_dir() else p.read_bytes()
            )
    return found


def outside_folder(tmp_path: Path) -> Path:
    """A folder outside every output, shaped like a figures folder (so that a write through a link would succeed)."""
    outside = tmp_path / "outside"
    (outside / "t3").mkdir(parents=True)
    (outside / "t3" / "mine.txt").write_text("not fedcli's\n")
    return outside


def plant_after_first_figure(monkeypatch, folder: Path, outside: Path) -> None:
    """Right after the command's first figure file is written: ``folder`` moved aside, a link to ``outside`` in its
    place."""
    from matplotlib.figure import Figure

    savefig = Figure.savefig
    done = []

    def savefig_then_plant(self, *a, **k):
        savefig(self, *a, **k)
        if not done:
            done.append(True)
            folder.rename(folder.with_name(folder.name + "-moved"))
            folder.symlink_to(outside, target_is_directory=True)

    monkeypatch.setattr(Figure, "savefig", savefig_then_plant)


def test_a_link_planted_at_paper_figures_while_it_draws_gets_nothing(results, tmp_path, monkeypatch, capsys):
    outside = outside_folder(tmp_path)
    before = tree(outside)
    out = tmp_path / "sec"
    plant_after_first_figure(monkeypatch, out / "figures", outside)
    code, _, err = cli(["report", str(results), "--paper", "fedlama-aaai", "--output", str(out)], capsys)
    assert tree(outside) == before  # before: the figures after the first one were written into outside/t3
    assert code == 2 and f"{out / 'figures'} is a symbolic link" in err and "Traceback" not in err, err
    assert (out / "figures").is_symlink() and not (out / "section.tex").exists()


def test_a_link_planted_at_a_runs_figures_while_it_draws_gets_nothing(results, tmp_path, monkeypatch, capsys):
    run = next(results.glob("t3/*/seed0"))
    outside = outside_folder(tmp_path)
    before = tree(outside)
    plant_after_first_figure(monkeypatch, run / "figures", outside)
    code, _, err = cli(["report", str(run)], capsys)
    assert tree(outside) == before
    assert code == 2 and f"{run / 'figures'} is a symbolic link" in err and "Traceback" not in err, err
    (run / "figures").unlink()


def test_a_folder_held_by_its_descriptor_is_written_where_it_was(tmp_path):
    """The primitive: a link planted at any folder between the root and the file after the folder was opened
    changes nothing (the file goes into the folder that was opened); the next open refuses the link."""
    from fedcli.safefs import LinkRefused, open_dir, writing_into

    root, outside = tmp_path / "out", outside_folder(tmp_path)
    before = tree(outside)
    with writing_into(root):
        folder = open_dir(root / "figures" / "t3")
        (root / "figures").rename(root / "moved")
        (root / "figures").symlink_to(outside, target_is_directory=True)
        with folder:
            with folder.open_file("a.png", "wb") as f:
                f.write(b"png")
            folder.atomic_write("a.txt", "caption\n")
        with pytest.raises(LinkRefused, match="figures is a symbolic link"):
            open_dir(root / "figures" / "t3")
    assert tree(outside) == before
    assert (root / "moved" / "t3" / "a.png").read_bytes() == b"png" and (root / "moved" / "t3" / "a.txt").exists()
    with (
        pytest.raises(LinkRefused, match="a.txt is a symbolic link"),
        writing_into(root),
        open_dir(root / "moved" / "t3") as f,
    ):
        (root / "moved" / "t3" / "a.txt").unlink()
        (root / "moved" / "t3" / "a.txt").symlink_to(outside / "t3" / "mine.txt")
        f.atomic_write("a.txt", "no")
    assert tree(outside) == before


def test_the_folder_the_user_names_may_be_a_link(results, tmp_path, capsys):
    """Item 6: ``--paper --output LINK``, ``--figures LINK`` and ``--output LINK/table.md`` write into the link's
    target,
    as ``train --out LINK`` does (before: --paper --output LINK and --figures LINK were refused)."""
    place = tmp_path / "place"
    place.mkdir()
    link = tmp_path / "link"
    link.symlink_to(place, target_is_directory=True)
    code, _, err = cli(["report", str(results), "--paper", "fedlama-aaai", "--output", str(link)], capsys)
    assert code == 0, err
    assert (place / "section.tex").is_file() and (place / "figures" / "t3" / "t3-curves.pdf").is_file()
    figs = tmp_path / "figs-link"
    (place / "figs").mkdir()
    figs.symlink_to(place / "figs", target_is_directory=True)
    code, _, err = cli(
        ["report", str(results), "--figures", str(figs), "--figure", "t3-curves"], capsys
    )  # one is enough
    assert code == 0, err
    assert (place / "figs" / "t3-curves.png").is_file()
    run = next(results.glob("t3/*/seed0"))
    code, _, err = cli(["report", str(run), "--figures", str(figs), "--output", str(link / "table.md")], capsys)
    assert code == 0, err
    assert "| Run | Method |" in (place / "table.md").read_text()
