"""fedcli: a command-line experiment runner for layer-wise federated learning research."""

__version__ = "0.1.0"
