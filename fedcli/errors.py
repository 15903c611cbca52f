"""Error types with the exit codes listed in the README (Exit codes).

Every error the user can cause is raised as one of these; the CLI entry point prints
``fedcli: error: <one sentence>`` on stderr and exits with ``exit_code``, never a traceback.
"""


class FedcliError(Exception):
    """Base class: a user-facing error with a one-sentence message."""

    exit_code = 1


class ConfigError(FedcliError):
    """Bad usage or invalid configuration (exit 2). The message names the key."""

    exit_code = 2


class DataError(FedcliError):
    """Missing or corrupt dataset or partition file (exit 3). Names the file and the expected format."""

    exit_code = 3


class DivergenceError(FedcliError):
    """Training diverged: a non-finite loss or update (exit 4). Names the round and client."""

    exit_code = 4
