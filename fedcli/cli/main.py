"""The ``fedcli`` command: partition | train | sweep | report. Errors are one line with an exit code."""

from __future__ import annotations

import sys

import typer

try:  # typer >= 0.20 vendors click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer on top of click
    from click import ClickException

from fedcli.cli.partition import partition
from fedcli.cli.train import train
from fedcli.errors import FedcliError

app = typer.Typer(name="fedcli", help="Federated-learning experiment runner for layer-wise methods (FedLAMA, FedALA, Fed-LAMB).",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False,
                  context_settings={"help_option_names": ["-h", "--help"]})
app.command("train", help=train.__doc__)(train)
app.command("partition", help=partition.__doc__)(partition)


def main(argv: list[str] | None = None) -> int:
    from fedcli.cli.console import error

    try:
        app(args=argv, standalone_mode=False)
    except FedcliError as e:
        error(str(e), e.exit_code)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        error("aborted", 130)
    except ClickException as e:
        msg = e.format_message().replace("\n", " ")
        error(msg, e.exit_code)
    except KeyboardInterrupt:
        error("interrupted", 130)
    return 0


if __name__ == "__main__":
    sys.exit(main())
