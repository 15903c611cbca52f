"""Method presets: a named method is a choice of the five parts of ``fedcli.fl.parts``.

Presets are registered by the small modules in ``fedcli.fl.algorithms`` (one per method).
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS: dict[str, "Method"] = {}


@dataclass(frozen=True)
class Method:
    name: str
    summary: str
    local_step: str = "sgd"
    schedule: str = "periodic"
    codec: str = "identity"
    init: str = "overwrite"
    server: str = "average"
    aliases: tuple[str, ...] = ()
    personalized: bool = False  # judged by each client's own model on its local test split (personal_acc; fedcli/fl/personal.py)

    def parts(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("local_step", "schedule", "codec", "init", "server")}


def register_method(method: Method) -> Method:
    for name in (method.name, *method.aliases):
        METHODS[name] = method
    return method


def _load_all() -> None:
    import importlib
    import pkgutil

    import fedcli.fl.algorithms as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")


_load_all()
