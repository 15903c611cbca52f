"""``fedcli tune`` (issue 58, section 2; docs/tuning.md): the ``[tune]`` recipe table (:mod:`.space`), objectives read
from run directories (:mod:`.objectives`), the study folder (:mod:`.study`), pruning (:mod:`.pruning`) and the
coordinator (:mod:`.coordinator`). Torch-free and optuna-free at import: Optuna is imported only where a study runs.
"""
