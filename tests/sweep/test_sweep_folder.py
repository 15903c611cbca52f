"""Issue 48, points 1 and 2: a sweep never replaces another sweep's folder unless told to (``--overwrite``), and the
command that (re-)runs a sweep, as ``fedcli report`` and the paper section print it, works from any folder."""

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from fedcli.cli.main import main
from fedcli.reports.core import Sweep
from fedcli.reports.paper import _paragraph
from fedcli.results.sweepdir import SweepManifest, load_manifest, recipe_of
from fedcli.sweep.run import prepare_sweep, run_sweep
from runkit import ROOT, error_lines
from sweepkit import RECIPE as TINY

TABLE3 = ROOT / "recipes/fedlama/aaai-table3.toml"  # the two recipes
FIG2 = ROOT / "recipes/fedlamb/fig2-iid.toml"


def planned_folder(recipe: Path, root: Path) -> None:
    """The folder of a sweep of ``recipe`` (smoke, 1 seed) as ``fedcli sweep`` leaves it before its first run ends:
    its sweep.json (written before anything runs), no run finished."""
    rec, root, seeds, runs, products = prepare_sweep(recipe, "smoke", 1, out=root)
    root.mkdir(parents=True)
    SweepManifest(root, rec, seeds, runs, products).write()


def sweep_args(recipe: Path, root: Path, *more: str) -> list[str]:
    return ["sweep", str(recipe), "--scale", "smoke", "--seeds", "1", "--out", str(root), "--in-process", *more]


def fedcli(args: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``fedcli ARGS`` in this process (a command that succeeds returns 0)."""
    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    cap = capsys.readouterr()
    return code or 0, cap.out, cap.err


def test_a_sweep_refuses_a_folder_that_holds_another_recipes_sweep(tmp_path, monkeypatch, capsys):
    """The issue's case: a sweep of fig2-iid into a folder holding aaai-table3's sweep started at once and rewrote
    sweep.json; now exit 2 and one line naming both recipes, --dry-run too; --overwrite (with --dry-run here) goes on
    and says what it replaces."""
    root = tmp_path / "aaai-table3-smoke"
    planned_folder(TABLE3, root)
    before = (root / "sweep.json").read_bytes()
    want = f"fedcli: error: --out {root} holds the sweep of {TABLE3.resolve()}, not of {FIG2.resolve()}"
    for extra in ([], ["--dry-run"]):
        code, out, err = fedcli(sweep_args(FIG2, root, *extra), capsys)
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1 and lines[0].startswith(want) and "--overwrite" in lines[0], err
        assert (root / "sweep.json").read_bytes() == before and sorted(p.name for p in root.iterdir()) == ["sweep.json"]
    code, out, err = fedcli(sweep_args(FIG2, root, "--dry-run", "--overwrite", "--quiet"), capsys)
    assert code == 0, err
    said = " ".join(err.split())
    assert (
        f"fedcli sweep: --overwrite: --out {root} holds the sweep of {TABLE3.resolve()}, not of {FIG2.resolve()}"
        in said
    )
    assert said.rstrip().endswith("; this sweep replaces it"), err
    # the same recipe, however it is named (here relative, from its own folder), is the same sweep
    monkeypatch.chdir(TABLE3.parent)
    code, _, err = fedcli(sweep_args(Path(TABLE3.name), root, "--dry-run", "--quiet"), capsys)
    assert code == 0, err


def test_an_old_sweep_json_with_a_relative_recipe_path_is_read_from_anywhere(tmp_path, monkeypatch, capsys):
    """Before issue 48 sweep.json kept the recipe as typed, relative to the folder the sweep started in (the issue:
    ``../fedcli/recipes/...``). Such a file still names its recipe (found above the sweep folder), so the folder is
    refused to another recipe and open to its own, from any current folder. (A checkout with the two recipes, in
    tmp_path: a sweep's results/ folder lives in its checkout.)"""
    checkout = tmp_path / "fedcli"
    for r in (TABLE3, FIG2):
        (checkout / r.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(r, checkout / r.relative_to(ROOT))
    table3, fig2 = checkout / TABLE3.relative_to(ROOT), checkout / FIG2.relative_to(ROOT)
    root = checkout / "results" / "aaai-table3-smoke"
    planned_folder(table3, root)
    sj = json.loads((root / "sweep.json").read_text())
    sj["recipe"] = "../fedcli/recipes/fedlama/aaai-table3.toml"  # typed in a folder beside the checkout
    sj.pop("recipe_from_sweep")
    (root / "sweep.json").write_text(json.dumps(sj))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    code, _, err = fedcli(sweep_args(fig2, root, "--dry-run"), capsys)
    assert code == 2 and f"holds the sweep of {table3.resolve()}, not of {fig2.resolve()}" in " ".join(err.split()), err
    code, _, err = fedcli(sweep_args(table3, root, "--dry-run", "--quiet"), capsys)
    assert code == 0, err
    assert (
        Sweep(root, sj).retry_hint()
        == f"fedcli sweep {table3.resolve()} --scale smoke --seeds 1 --out {root.resolve()}"
    )
    assert recipe_of(sj, root) == table3.resolve()


def test_a_sweep_refuses_a_folder_that_holds_the_same_recipe_at_another_scale(tmp_path, capsys):
    """aaai-table3's paper-scale sweep in a folder (its sweep.json, as written before the first run): the same recipe
    at --scale smoke into it would find every paper-scale run stale and train it again at the smoke scale, replacing
    hours of GPU work: refused (exit 2, --dry-run too, naming both scales), nothing written; --overwrite goes on."""
    root = tmp_path / "aaai-table3-paper"
    rec, root, seeds, runs, products = prepare_sweep(TABLE3, "paper", 1, out=root)
    root.mkdir(parents=True)
    SweepManifest(root, rec, seeds, runs, products).write()
    before = (root / "sweep.json").read_bytes()
    for extra in ([], ["--dry-run"]):
        code, _, err = fedcli(sweep_args(TABLE3, root, *extra), capsys)
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(
            f"fedcli: error: --out {root} holds the sweep of {TABLE3.resolve()} at --scale paper, not at --scale smoke"
        ), err
        assert (root / "sweep.json").read_bytes() == before and sorted(p.name for p in root.iterdir()) == ["sweep.json"]
    code, _, err = fedcli(sweep_args(TABLE3, root, "--dry-run", "--overwrite", "--quiet"), capsys)
    assert code == 0 and "at --scale paper, not at --scale smoke" in " ".join(err.split()), err


def test_a_sweep_refuses_a_folder_whose_tables_its_recipe_does_not_make(tmp_path, capsys):
    """The same recipe file, its table renamed: a sweep would rewrite sweep.json without table 't' (no report of it
    could be made): refused; with --overwrite it runs and sweep.json lists the new table only."""
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY)
    root = tmp_path / "s"
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)
    recipe.write_text(TINY.replace('name = "t"', 'name = "t2"'))
    code, _, err = fedcli(sweep_args(recipe, root), capsys)
    lines = error_lines(err)
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith(
        f"fedcli: error: --out {root} holds a sweep of {recipe.resolve()} with table 't', which "
        f"{recipe.resolve()} does not make"
    ), err
    assert [t["name"] for t in load_manifest(root)["tables"]] == ["t"]
    code, _, err = fedcli(sweep_args(recipe, root, "--overwrite"), capsys)
    assert code == 0, err
    assert [t["name"] for t in load_manifest(root)["tables"]] == ["t2"]
    assert "nothing to run" in err  # the runs themselves did not change: kept, not run again


def test_the_rerun_command_works_from_any_folder(tmp_path, monkeypatch, capsys):
    """A sweep started in one folder with a relative recipe path; its report, asked from another folder, names the
    runs to redo and the command to redo them: that command, run there, works, and the paper section's paragraph
    prints the same command and the same form of the recipe's path."""
    start, elsewhere = tmp_path / "here", tmp_path / "elsewhere" / "deeper"
    start.mkdir()
    elsewhere.mkdir(parents=True)
    (start / "recipes").mkdir()
    (start / "recipes" / "tiny.toml").write_text(TINY)
    monkeypatch.chdir(start)
    code, _, err = fedcli(
        [
            "sweep",
            "recipes/tiny.toml",
            "--scale",
            "smoke",
            "--seeds",
            "2",
            "--out",
            "results/tiny",
            "--in-process",
            "--quiet",
        ],
        capsys,
    )
    assert code == 0, err
    root = start / "results" / "tiny"
    sj = load_manifest(root)
    shutil.rmtree(root / "fedavg-x1" / "seed1")  # one run lost
    monkeypatch.chdir(elsewhere)
    rel = Path("../../here/results/tiny")
    code, _, err = fedcli(["report", str(rel), "--table", "t"], capsys)
    assert code == 2, err
    command = re.search(r"\(re-\)run them with `([^`]+)`", " ".join(err.split())).group(1)
    text, paragraph_command = _paragraph(Sweep(rel, sj), elsewhere)
    argv = shlex.split(command)
    code, _, err = fedcli([*argv[1:], "--in-process", "--quiet"], capsys)  # run here, where the report printed it
    assert code == 0, err
    code, out, err = fedcli(["report", str(rel), "--table", "t"], capsys)
    assert code == 0 and "FedAvg x1" in out, err
    # the report's command (typed here) names the recipe and the folder whole; the paragraph's (for a paper: never an
    # absolute path) names the same ones relative to the folder it says, and works when typed there
    assert command == f"fedcli sweep {start / 'recipes' / 'tiny.toml'} --scale smoke --seeds 2 --out {root}"
    assert str(tmp_path) not in paragraph_command and str(tmp_path) not in text
    assert "(paths relative to this section's folder)" in text
    assert (
        paragraph_command
        == "fedcli sweep ../../here/recipes/tiny.toml --scale smoke --seeds 2 --out ../../here/results/tiny"
    )
    assert "Recipe `../../here/recipes/tiny.toml` at scale smoke" in text
    shutil.rmtree(root / "fedavg-x1" / "seed1")
    code, _, err = fedcli(
        [*shlex.split(paragraph_command)[1:], "--in-process", "--quiet"], capsys
    )  # typed where it says
    assert code == 0 and (root / "fedavg-x1" / "seed1" / "manifest.json").exists(), err
    assert sj["recipe"] == str(start / "recipes" / "tiny.toml") and sj["recipe_from_sweep"] == "../../recipes/tiny.toml"


def tiny_sweep(recipe: Path, root: Path, text: str = TINY) -> None:
    """The tiny recipe written at ``recipe`` and swept (smoke, 1 seed) into ``root``: two completed runs."""
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(text)
    run_sweep(recipe, "smoke", seeds=1, out=root, in_process=True)


def files_of(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_recipe_renamed_away_and_another_written_under_its_name_is_another_sweep(tmp_path, capsys):
    """Issue 56, item 3: A's recipe renamed (r.toml -> a.toml), then another r.toml swept into A's folder: the same
    file name counted as the same recipe, the plan said "1 to run" and A's run was trained over. A sweep is what
    defines its runs (the recipe's text), not its file name: exit 2 naming both, --dry-run too, nothing changed. The
    recipe edited in place (its old text in no file beside it) stays the same sweep (its changed run is stale)."""
    rec, root = tmp_path / "rec", tmp_path / "SW"
    tiny_sweep(rec / "r.toml", root)
    (rec / "r.toml").rename(rec / "a.toml")
    (rec / "r.toml").write_text(TINY.replace("tau = 2\n", "tau = 3\n", 1))
    before = files_of(root)
    for extra in (["--dry-run"], []):
        code, _, err = fedcli(sweep_args(rec / "r.toml", root, *extra), capsys)
        lines = error_lines(err)
        assert code == 2 and len(lines) == 1, err
        assert lines[0].startswith(
            f"fedcli: error: --out {root} holds the sweep of {(rec / 'a.toml').resolve()}, "
            f"not of {(rec / 'r.toml').resolve()} (this sweep would train over its run "
            f"'FedAvg x1' seed 0 with this recipe's settings"
        ), err
        assert files_of(root) == before
    # the report's re-run command finds the renamed recipe by its text
    assert Sweep(root, load_manifest(root)).retry_hint().startswith(f"fedcli sweep {(rec / 'a.toml').resolve()} ")
    (rec / "a.toml").unlink()  # now r.toml is A's recipe edited in place: its changed run is trained again
    code, _, err = fedcli(sweep_args(rec / "r.toml", root, "--quiet"), capsys)
    assert code == 0 and "1 ran now, 1 were already done" in err, err
    assert json.loads((root / "fedavg-x1" / "seed0" / "manifest.json").read_text())["config"]["tau"] == 3


def test_overwrite_says_which_of_the_other_sweeps_runs_it_trains_over(tmp_path, capsys):
    """Issue 56, item 2: recipe B swept with --overwrite into recipe A's folder, both with a run 'FedAvg x1': the
    message said A's runs "would stay on disk", then trained A's 'FedAvg x1' over with B's settings. Now the refusal
    and the --overwrite notice name the runs B trains over (A's 'FedAvg x1'), and say that A's run B does not have
    stays on disk; --overwrite does exactly that (A's other run byte for byte)."""
    root = tmp_path / "SW"
    tiny_sweep(tmp_path / "a.toml", root)
    b = tmp_path / "b.toml"
    b.write_text(TINY.replace("tau = 2\n", "tau = 3\n", 1).replace("FedLAMA phi=2", "FedLAMA B"))
    said = (
        "(this sweep would train over its run 'FedAvg x1' seed 0 with this recipe's settings; its other 1 run(s) "
        "would stay on disk, but no report could be made of them)"
    )
    before = files_of(root)
    code, _, err = fedcli(sweep_args(b, root), capsys)
    assert code == 2 and said in " ".join(err.split()), err
    assert files_of(root) == before
    code, _, err = fedcli(sweep_args(b, root, "--overwrite", "--quiet"), capsys)
    assert (
        code == 0
        and f"fedcli sweep: --overwrite: --out {root} holds the sweep of {(tmp_path / 'a.toml').resolve()}"
        in " ".join(err.split())
        and said in " ".join(err.split())
    ), err
    lama = {k: v for k, v in before.items() if k.startswith("fedlama-phi-2/")}
    assert lama and {k: v for k, v in files_of(root).items() if k.startswith("fedlama-phi-2/")} == lama
    assert json.loads((root / "fedavg-x1" / "seed0" / "manifest.json").read_text())["config"]["tau"] == 3
    assert [e["name"] for e in load_manifest(root)["runs"]] == ["FedAvg x1", "FedLAMA B"]


def test_a_copy_of_the_recipe_and_a_moved_checkout_sweep_into_the_original_folder(tmp_path, capsys):
    """Issue 57: a sweep is identified by its recipe's text and scale, the recipe's path is a hint. The checkout
    (recipe, data folder and results) moved: its runs are still done (their data folder moved with them: it was
    stale, every run trained again), and its recipe edited in place there is still the same sweep (found through the
    path relative to the sweep folder); a byte-identical copy of the recipe in another folder of the checkout sweeps
    into the original's folder with nothing to run."""
    text = TINY.replace("[base]\n", 'root = ".."\n\n[base]\ndata_dir = "data"\n', 1)  # the data beside the recipes
    (tmp_path / "here" / "data").mkdir(parents=True)
    tiny_sweep(tmp_path / "here" / "recipes" / "r.toml", tmp_path / "here" / "results" / "r", text)
    shutil.move(tmp_path / "here", tmp_path / "moved")
    recipe, root = tmp_path / "moved" / "recipes" / "r.toml", tmp_path / "moved" / "results" / "r"
    recipe.write_text(text.replace("tau = 2\n", "tau = 3\n", 1))
    code, _, err = fedcli(sweep_args(recipe, root, "--dry-run", "--quiet"), capsys)
    assert code == 0, err
    recipe.write_text(text)
    code, _, err = fedcli(sweep_args(recipe, root, "--quiet"), capsys)
    assert code == 0 and "nothing to run" in err, err
    copy = tmp_path / "moved" / "mine" / "copy.toml"
    copy.parent.mkdir()
    copy.write_text(text)
    code, _, err = fedcli(sweep_args(copy, root, "--quiet"), capsys)
    assert code == 0 and "nothing to run" in err, err
