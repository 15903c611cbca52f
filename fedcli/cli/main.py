"""The ``fedcli`` command: partition | train | sweep | report. Errors are one line with an exit code."""

from __future__ import annotations

import sys
from pathlib import Path

from fedcli.runtime import early

# before anything heavy is imported: a signal from the first instant exits cleanly (fedcli/runtime/early.py)
early.install()

import typer  # noqa: E402

try:  # typer >= 0.20 vendors click
    from typer._click.exceptions import ClickException
except ImportError:  # pragma: no cover - older typer on top of click
    from click import ClickException

from fedcli.errors import FedcliError  # noqa: E402

#: the commands, in the order ``fedcli --help`` lists them, and the module that defines each. A command's module is
#: imported only when that command runs (or the list is shown): ``train`` and ``partition`` build their options from
#: the assembled config, which loads every method file and so torch, a cost ``report`` or ``--version`` need not pay.
COMMANDS = {
    "train": "fedcli.cli.train",
    "partition": "fedcli.cli.partition",
    "bench": "fedcli.cli.bench",
    "sweep": "fedcli.cli.sweep",
    "tune": "fedcli.cli.tune",
    "report": "fedcli.cli.report",
}


def _version(value: bool) -> None:
    if value:
        import platform

        from fedcli.version import __version__

        print(f"fedcli {__version__} (python {platform.python_version()})")
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_version,
        metavar="",  # a plain flag, no <bool>
        help="Print the fedcli version and exit.",
    ),
):
    """Federated-learning experiment runner for layer-wise methods (FedLAMA, FedALA, Fed-LAMB)."""


def _listed(name: str):
    """A stand-in for command ``name`` in the bare listing: its one-line help, read from the first line of the
    command's docstring in its module's source (no import: ``train`` and ``partition`` would load torch)."""
    import ast
    import importlib.util

    source = Path(importlib.util.find_spec(COMMANDS[name]).origin).read_text()
    fn = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == name)

    def command():
        pass

    command.__doc__ = ast.get_docstring(fn)
    return command


def build_app(names=None, listing: bool = False) -> typer.Typer:
    """The ``fedcli`` Typer app with the commands ``names`` (default: all of them); ``listing``: stand-ins that
    only show each command's help line (``fedcli --help``)."""
    import importlib

    from fedcli.cli.helpfmt import PanelHelpCommand, PlainFlagsGroup

    app = typer.Typer(
        name="fedcli",
        help="Federated-learning experiment runner for layer-wise methods (FedLAMA, FedALA, Fed-LAMB).",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        cls=PlainFlagsGroup,
        context_settings={"help_option_names": ["-h", "--help"]},
    )

    app.callback()(_root)
    for name in COMMANDS if names is None else names:
        fn = _listed(name) if listing else getattr(importlib.import_module(COMMANDS[name]), name)
        app.command(name, help=fn.__doc__, cls=PanelHelpCommand)(
            fn
        )  # --help without rich's layout (fedcli/cli/helpfmt.py)
    return app


def _needs(argv: list[str]) -> tuple[list[str] | None, bool]:
    """The commands ``argv`` needs, and whether listed: only the command it names, none for a bare ``--version``, else
    all of them (the listing)."""
    command = next((a for a in argv if not a.startswith("-")), None)
    if command in COMMANDS:
        return [command], False
    if command is None and "--version" in argv and not {"-h", "--help"} & set(argv):
        return [], False
    return None, True


#: the click commands :func:`command_for` built in this process, by what they were built from
_BUILT: dict = {}


def command_for(argv: list[str]):
    """The click command of the app ``argv`` needs (:func:`_needs`, :func:`build_app`), built once per process for the
    same command functions: Typer converts every option of a command each time it builds one (4 ms for ``train``'s),
    and a notebook's, a sweep worker's or a test's process runs ``fedcli`` many times. A command module reloaded or a
    command function replaced is built again (the key holds the functions)."""
    import importlib

    import typer.main

    names, listing = _needs(argv)
    fns = () if listing else tuple(getattr(importlib.import_module(COMMANDS[n]), n) for n in names)
    key = (tuple(names or ()), listing, fns)
    if key not in _BUILT:
        _BUILT[key] = typer.main.get_command(build_app(names, listing=listing))
    return _BUILT[key]


def _mpi_comm():
    mpi = sys.modules.get("fedcli.comm.mpi")  # not imported: no MPI communicator (and no torch import on an error path)
    if mpi is None:
        return None
    comm = mpi.CURRENT.get("comm")
    return comm if comm is not None and comm.size > 1 else None


def _abort_job(e: BaseException, code: int) -> None:
    """Under MPI, an error on one rank ends the whole job (no hang) and marks the run failed."""
    from fedcli.cli.console import err_console
    from fedcli.results.sentinel import mark_failed
    from fedcli.runner import ACTIVE_RUN

    comm = _mpi_comm()
    msg = str(e) if isinstance(e, FedcliError) else f"{type(e).__name__}: {e}"
    err_console.print(f"fedcli: error: rank {comm.rank}: {msg}", markup=False, soft_wrap=True)
    if "dir" in ACTIVE_RUN:
        mark_failed(ACTIVE_RUN["dir"], f"rank {comm.rank}: {msg}")
    comm.abort(code)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = _run(args)
    finally:
        early.done()  # a signal during the interpreter's teardown: ignored, the command's work is done
    early.finish(code)  # the fedcli command itself: exits here, without the interpreter's teardown
    return code


def invoke(args: list[str]):
    """``fedcli ARGS`` in this process: the command's return value (``fedcli report``'s table and figures), with every
    failure the user can cause raised as a :class:`FedcliError` carrying its one-line message and exit code (a usage
    error of the parser: exit 2; a file that cannot be read or written; out of memory). ``typer.Exit`` and
    ``typer.Abort`` pass through. The ``fedcli`` command prints the error (:func:`_run`); ``fedcli.train`` and
    ``fedcli.report`` in a notebook raise it (fedcli/api.py)."""
    try:
        return command_for(args)(args=args, standalone_mode=False)
    except FedcliError:
        raise
    except ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `fedcli`: the help was shown, nothing failed
            return None
        from fedcli.errors import ConfigError

        msg = e.format_message().replace("\n", " ")
        err = ConfigError(msg) if e.exit_code == ConfigError.exit_code else FedcliError(msg)
        err.exit_code = e.exit_code
        raise err from None
    except OSError as e:  # a file fedcli reads or writes, where no closer code named the problem: still one line
        from fedcli.errors import os_error

        raise os_error(e, doing="read or write") from None
    except Exception as e:
        from fedcli.errors import memory_error

        oom = memory_error(e)  # out of memory outside a run (loading data, building the model): still one line
        if oom is None:
            raise
        raise oom from None


def _run(args: list[str]) -> int:
    from fedcli.cli.console import err_line, error

    try:
        invoke(args)
    except FedcliError as e:
        comm = _mpi_comm()
        if comm is not None and not getattr(e, "collective", False):
            _abort_job(e, e.exit_code)
        if comm is not None:  # an error every rank raised together: rank 0 prints the one line for everyone, and
            if comm.rank == 0:  # no rank leaves before that
                err_line(str(e))
            comm.barrier()
            # then every rank ends MPI itself: a non-zero exit with MPI still up makes mpi4py abort the job, and
            # MPICH's abort adds its own "Abort(2) on node 0 ..." line and leaves its shared-memory file (2 MB) in
            # /dev/shm; mpiexec still exits with the code
            comm.finalize()
            sys.exit(e.exit_code)
        error(str(e), e.exit_code)
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        error("aborted", 130)
    except KeyboardInterrupt:
        error("interrupted", 130)
    except Exception as e:
        if _mpi_comm() is not None:
            _abort_job(e, 1)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
