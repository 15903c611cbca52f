"""Many runs: ``fedcli sweep`` (``run``: a recipe's grid x seeds; ``executors``: how its runs run), its Slurm scheduler
(``slurm``), GPU placement (``placement``), the time estimate said before a sweep starts (``estimate``) and the
estimate's measuring child process (``probe``).

The package names one class itself, ``fedcli.sweep.Executor``: where Slurm jobs submitted before the sweep became a
package find the executor class in their pickled call (``.slurm/<job>/*_submitted.pkl``, read when the job starts;
fedcli/slurm.py). Its module imports neither torch nor numpy.
"""

from fedcli.sweep.executors import Executor

__all__ = ["Executor"]
