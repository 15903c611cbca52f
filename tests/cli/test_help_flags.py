"""A flag takes no value, and ``--help`` says so (issue 57): no command's help shows a flag with a type (Typer drew
``--dry-run <bool>``, ``--help <bool>``, as if they took a value; only ``fedcli --help``'s ``--version`` had been
fixed). Checked for every command and the bare ``fedcli``, with fedcli's renderer and with Typer's
(``FEDCLI_RICH_HELP=1``), which tests/cli/test_help.py compares line by line."""

from __future__ import annotations

import pytest

from fedcli.cli.main import COMMANDS


def flag_names(command: str | None) -> list[str]:
    """The long names of every flag (an option without a value) of ``fedcli COMMAND`` (None: the group)."""
    import typer

    from fedcli.cli.main import build_app

    group = typer.main.get_command(build_app([command] if command else []))
    cmd = group.commands[command] if command else group
    ctx = cmd.make_context(command or "fedcli", [], resilient_parsing=True)
    return [o for p in cmd.get_params(ctx) if getattr(p, "is_flag", False) for o in p.opts if o.startswith("--")]


@pytest.mark.parametrize("command", [None, *COMMANDS])
@pytest.mark.parametrize("rich", [False, True])
def test_no_flag_shows_a_type(monkeypatch, capsys, command, rich):
    from fedcli.cli.helpfmt import RICH_HELP
    from fedcli.cli.main import main

    monkeypatch.setenv("COLUMNS", "2000")
    if rich:
        monkeypatch.setenv(RICH_HELP, "1")
    else:
        monkeypatch.delenv(RICH_HELP, raising=False)
    try:
        code = main([*([command] if command else []), "--help"])
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr().out
    assert code in (0, None) and "Usage" in out
    assert "<bool>" not in out, [line for line in out.splitlines() if "<bool>" in line][:3]
    flags = flag_names(command)
    assert "--help" in flags and (command != "sweep" or "--dry-run" in flags)
    rows = {}
    for line in out.splitlines():
        words = line.replace("│", " ").split()
        if words and words[0].lstrip("-").replace(",", "") and words[0].startswith("--"):
            rows.setdefault(words[0].split(",")[0], words)
    for name in flags:
        words = rows[name]
        # the row is the name (and a short name, -h), then the help: no type between them
        rest = [w for w in words[1:] if not (w.startswith("-") and len(w) == 2)]
        assert rest and not rest[0].startswith("<") and rest[0] not in ("BOOLEAN", "bool"), (command, name, words[:4])
