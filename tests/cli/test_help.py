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
    return subprocess.run([sys.executable, "-m", "fedcli", *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


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
