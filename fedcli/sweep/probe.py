"""The sweep estimate's measuring child process: ``python -m fedcli.sweep.probe SPAWN_TIME reference|- [JOBS]``.

Started by :func:`fedcli.sweep.estimate.overheads` (``_probe``), which reads its stdout: a new interpreter, the jobs
(JSON) on its standard input; or, measuring data alone for a sweep of worker processes, forked from the warm server,
the jobs as its third argument (then its imports are the server's, done before). It imports what a sweep's
worker process imports before its first local step (``fedcli/sweep/executors.py``, ``_pool_init``, then the config with
every method, the engine and torch), says how long that took from its spawn (``SPAWN_TIME``, the parent's
``time.time()``), then loads each dataset of the jobs once and partitions it as each run
would, one JSON line per measurement; with ``reference`` it then trains the reference run
(:data:`fedcli.sweep.estimate.REFERENCE`) for N and 5N iterations and times one model step.

Nothing is imported at the top of this module: the start-up it measures is the imports in :func:`main`.
"""


def main(argv: list[str]) -> None:
    import importlib
    import json
    import sys
    import tempfile
    import time

    for name in ("fedcli.runner", "fedcli.config", "fedcli.fl.engine"):
        importlib.import_module(name)
    print(json.dumps({"startup": time.time() - float(argv[0])}), flush=True)

    import fedcli.data.setup as setup
    from fedcli.config import TrainConfig
    from fedcli.sweep.estimate import REFERENCE, data_facts, measure_step
    from fedcli.sweep.executors import execute_inline, memoize_datasets

    memoize_datasets()
    for job in json.loads(argv[2] if len(argv) > 2 else sys.stdin.read()):
        try:
            t = time.perf_counter()
            setup.load_data(TrainConfig(**job["config"]))
            print(json.dumps({"data": job["key"], "s": time.perf_counter() - t}), flush=True)
            for key, cfg in job["parts"]:
                t = time.perf_counter()
                setup.load_data_and_partition(TrainConfig(**cfg))
                print(json.dumps({"part": key, "s": time.perf_counter() - t}), flush=True)
        except Exception as e:
            why = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
            print(json.dumps({"failed": job["key"], "why": why}), flush=True)
    if argv[1] == "reference":
        n = REFERENCE["iterations"]
        with tempfile.TemporaryDirectory() as tmp:  # the reference training, short (twice: the first loads) and long
            walls = [
                execute_inline({**REFERENCE, "iterations": k, "out": f"{tmp}/{i}"}, f"{tmp}/{i}.log")[2]
                for i, k in enumerate((n, n, 5 * n))
            ]
        step = measure_step(TrainConfig(**REFERENCE).to_dict(), data_facts(REFERENCE, False, {}), 1)[0]
        print(json.dumps({"reference": walls[1:], "step": step}), flush=True)


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
