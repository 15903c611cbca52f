"""``fedcli tune``: hyper-parameter studies whose trials are ordinary fedcli runs (issue 58; the folder contract:
docs/tuning.md). Torch-free and Optuna-free at import: Optuna is imported only inside the functions that run a study."""
