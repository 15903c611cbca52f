"""The benchmarks of ``fedcli bench`` (docs/architecture.md, "benchmarks"): they may import the core, the core never
them.

- :mod:`fedcli.bench.compare`: fedcli against a per-client loop and Flower, on the same data and cores (the default);
- :mod:`fedcli.bench.flower`: Flower's simulation of that round workload, run in its own process;
- :mod:`fedcli.bench.scale`: ``--scale``, memory and time as the client count grows;
- :mod:`fedcli.bench.startup`: ``--workloads startup``, the answers that need no model (never imports torch);
- :mod:`fedcli.bench.ops`: ``--ops``, top-level torch ops per local iteration;
- :mod:`fedcli.bench.gpu`: ``--device D``, the cohort step near the hardware.

This package file imports nothing: ``fedcli bench --scale`` and the start-up timing must not load torch.
"""
