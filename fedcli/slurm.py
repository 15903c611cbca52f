"""Where Slurm jobs submitted before the sweep became a package (``fedcli.sweep``) find their function.

A job's call is pickled into the sweep folder when it is submitted (``.slurm/<job>/*_submitted.pkl``, submitit) and
read back when the job starts, possibly days later and after fedcli was updated; the pickle names the function by its
module path at submission, ``fedcli.slurm.run_job`` or ``fedcli.slurm.run_jobs``. The code is
:mod:`fedcli.sweep.slurm`.
"""

from fedcli.sweep.slurm import run_job, run_jobs  # noqa: F401
