"""fedcli's version (``fedcli --version``, a run's manifest and trackers, a tuning study's record): a module of the
bottom layer (pyproject.toml layers), so every layer reads it without importing the ``fedcli`` package, whose
``__init__`` holds the notebook API (the top layer)."""

__version__ = "0.1.0"
