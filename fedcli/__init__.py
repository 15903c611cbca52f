"""fedcli: a command-line experiment runner for layer-wise federated learning research."""

__version__ = "0.1.0"


#: the Python API for notebooks (fedcli/api.py), imported on first use so that ``import fedcli`` (and the ``fedcli``
#: command) loads neither pandas nor torch: ``fedcli.load(path)`` -> runs, metrics, layers, intervals, clients, system as
#: pandas DataFrames; ``fedcli.train(out, **flags)``; ``fedcli.report(*paths, **flags)`` (the report package, callable:
#: fedcli/report/__init__.py), also named ``fedcli.write_report``
API = ("load", "train", "write_report", "Results")


def __getattr__(name: str):
    import importlib  # by name, not an import statement: the modules that read __version__ import this package, and
    # the API (above the commands layer) must not count as their import (pyproject.toml layers)

    if name in API:
        return getattr(importlib.import_module("fedcli.api"), name)
    if name == "report":  # the package, callable as the report command
        return importlib.import_module("fedcli.report")
    raise AttributeError(f"module 'fedcli' has no attribute '{name}'")
