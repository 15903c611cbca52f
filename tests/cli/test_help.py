"""A CLI that explains itself: defaults and choices in `train --help`, `--version`, bare `fedcli` shows the help."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from fedcli import __version__
from fedcli.config import TrainConfig, flag

ROOT = Path(__file__).resolve().parents[2]


def cli(*args):
    env = {**os.environ, "COLUMNS": "2000", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "fedcli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120
    )


def test_train_help_shows_every_default_and_choice():
    p = cli("train", "--help")
    assert p.returncode == 0, p.stderr
    lines = {}
    for line in p.stdout.splitlines():
        words = line.strip("│ ").split()
        if words and words[0].startswith("--"):
            lines[words[0]] = line
    for f in dataclasses.fields(TrainConfig):
        line = lines.get(flag(f.name))
        assert line is not None, f.name
        assert "[default: " in line, line
        if isinstance(f.default, (int, float)) and not isinstance(f.default, bool):
            assert f"[default: {f.default:g}" in line, line
        elif isinstance(f.default, str) and f.default:
            assert f"[default: {f.default}]" in line or f"[default: {f.default}; presets: " in line, line
        if f.metadata.get("choices"):
            assert f"[choices: {', '.join(f.metadata['choices'])}]" in line and "<choice>" in line, line
    assert "presets: fedadagrad 0.0316, fedadam 0.0316, fedams 0.001, fedlamb 0.01, fedyogi 0.0316" in lines["--lr"]
    assert "fasttext" in lines["--model"] and "path/to/file.py:Factory" in lines["--model"]
    assert "imagefolder" in lines["--dataset"] and "tensors" in lines["--dataset"]


def test_version_and_bare_fedcli():
    p = cli("--version")
    assert p.returncode == 0 and p.stdout.startswith(f"fedcli {__version__} ")
    p = cli()
    assert p.returncode == 0 and "Usage:" in p.stdout and "train" in p.stdout and "fedcli: error" not in p.stderr


def test_version_is_a_plain_flag_in_the_help():
    """`fedcli --help` showed `--version <bool>` as if it took a value (issue 57): it is a flag."""
    p = cli("--help")
    line = next(ln for ln in p.stdout.splitlines() if "--version" in ln)
    assert "<bool>" not in line and "Print the fedcli version and exit." in line


def test_brackets_in_help_are_not_eaten():
    p = cli("sweep", "--help")
    assert "[base], [scale.*], [[runs]]" in p.stdout


def test_every_option_states_its_default_once():
    """An option whose help writes its own "[default: ...]" does not get typer's too (`sweep --progress` showed
    "[default: auto] [default: auto]")."""
    for command in ("train", "sweep", "report", "partition", "bench"):
        p = cli(command, "--help")
        assert p.returncode == 0, p.stderr
        options, current = {}, None
        for line in p.stdout.splitlines():
            words = line.strip("│ ").split()
            if words and words[0].startswith("-"):
                current = words[0]
            if current:
                options[current] = options.get(current, "") + line
        for name, text in options.items():
            assert text.count("[default:") <= 1, (command, name, text)


def rows(text: str) -> list[str]:
    """The help as its lines, each with its words joined by one space (box corners and edges dropped): what the two
    renderers must agree on at a width where no row wraps."""
    return [" ".join(line.replace("│", " ").split()) for line in text.splitlines() if line.strip()]


def test_help_lists_what_typers_renderer_lists(monkeypatch, capsys):
    """``--help`` is drawn without rich's layout engine (fedcli/cli/helpfmt.py: ``fedcli train --help`` took 1.5-2.3 s
    on
    2 cores, ~85% of it in rich drawing 28 panels; issue 48, 19; ``make bench-help`` times the two): the same panels in
    the same order, each with the same rows, names, types, help and defaults as Typer's renderer
    (``FEDCLI_RICH_HELP=1``) draws them, line for line at a width where nothing wraps."""
    from fedcli.cli.helpfmt import RICH_HELP
    from fedcli.cli.main import main

    monkeypatch.setenv("COLUMNS", "2000")
    for command in ("train", "sweep", "report", "partition", "bench"):
        shown = {}
        for rich in (True, False):
            if rich:
                monkeypatch.setenv(RICH_HELP, "1")
            else:
                monkeypatch.delenv(RICH_HELP, raising=False)
            assert main([command, "--help"]) == 0
            shown[rich] = capsys.readouterr().out
        ours, typers = rows(shown[False]), rows(shown[True])
        assert ours == typers, (command, [(a, b) for a, b in zip(ours, typers) if a != b][:3])
    # train's: the general panels, then one per method's options (the grouping is kept)
    monkeypatch.delenv(RICH_HELP, raising=False)
    assert main(["train", "--help"]) == 0
    panels = [r.strip("╭─╮ ") for r in rows(capsys.readouterr().out) if r.startswith("╭")]
    assert panels[:3] == ["Options", "core", "data"] and panels[-1].startswith("method options: ") and len(panels) >= 20


def test_train_help_is_drawn_in_boxes_as_wide_as_the_terminal():
    """At 80 columns (a pipe, no COLUMNS) every line of every panel is 80 wide, option names in the first column, the
    help wrapped in its own column; long names and every method's panel kept."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("COLUMNS", None)
    p = subprocess.run(
        [sys.executable, "-m", "fedcli", "train", "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    boxed = [line for line in p.stdout.splitlines() if line and line[0] in "╭│╰"]
    assert boxed and all(len(line) == 80 for line in boxed), [line for line in boxed if len(line) != 80][:3]
    titles = [line.strip("╭─╮ ") for line in boxed if line.startswith("╭")]
    assert titles[:3] == ["Options", "core", "data"] and "method options: fedlama" in titles and len(titles) >= 20
    algo = next(i for i, line in enumerate(boxed) if line.startswith("│ --algo "))
    assert "[default: fedlama]" in boxed[algo] + boxed[algo + 1]
