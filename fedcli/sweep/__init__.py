"""Many runs: ``fedcli sweep`` (``run``: a recipe's grid x seeds; ``executors``: how its runs run), its Slurm scheduler
(``slurm``), GPU placement (``placement``), the time estimate said before a sweep starts (``estimate``) and the
estimate's measuring child process (``probe``). Importing the package imports none of them."""


def __getattr__(name: str):
    """``fedcli.sweep.Executor``: where Slurm jobs submitted before the sweep became a package find the executor
    class in their pickled call (``.slurm/<job>/*_submitted.pkl``, read when the job starts; fedcli/slurm.py)."""
    if name == "Executor":
        from fedcli.sweep.executors import Executor

        return Executor
    raise AttributeError(f"module 'fedcli.sweep' has no attribute '{name}'")
