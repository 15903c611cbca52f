"""fedcli: a command-line experiment runner for layer-wise federated learning research.

The Python API for notebooks (fedcli/api.py): ``fedcli.load(path)`` -> runs, metrics, layers, intervals, clients,
system as pandas DataFrames; ``fedcli.train(out, **flags)``; ``fedcli.report(*paths, **flags)`` (``fedcli report``;
also named ``fedcli.write_report``; the report package is ``fedcli.reports``). ``import fedcli`` (and the ``fedcli``
command) loads neither pandas nor torch: the API imports them when called. This package is the top of the layers
(pyproject.toml): nothing in fedcli imports it (the version is ``fedcli.version``).
"""

# the fedcli command's signal handlers before anything else is imported (``python -m fedcli`` and the console script
# import this package first); a program that imports fedcli gets none (fedcli/runtime/early.py: is_entry)
from fedcli.runtime import early

early.install()

from fedcli.api import Results, load, train, write_report  # noqa: E402
from fedcli.api import write_report as report  # noqa: E402
from fedcli.version import __version__  # noqa: E402

__all__ = ["Results", "__version__", "load", "report", "train", "write_report"]
