"""Method presets: a named method is a choice of the five parts of ``fedcli.fl.parts``.

Presets are registered by the small modules in ``fedcli.fl.algorithms`` (one per method).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

METHODS: dict[str, "Method"] = {}

# What a personalized method is judged on: each client's model on its local test split. FedALA (Sec. 5,
# "Evaluation") and the methods of its Table 2 hold out 25% of every client's data for it.
PERSONAL_TEST_FRACTION = 0.25


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
    # config values this method runs with unless the user (flag or recipe key) gives another: the settings of
    # the method's paper (lr, server lr, participation, ...) that differ from fedcli's general defaults
    defaults: dict[str, Any] = field(default_factory=dict, compare=False)

    def parts(self) -> dict[str, str]:
        return {k: getattr(self, k) for k in ("local_step", "schedule", "codec", "init", "server")}

    def effective_defaults(self) -> dict[str, Any]:
        """The method's defaults; a personalized method also holds out its clients' local test splits."""
        base = {"client_test_fraction": PERSONAL_TEST_FRACTION} if self.personalized else {}
        return {**base, **self.defaults}


def register_method(method: Method) -> Method:
    for name in (method.name, *method.aliases):
        METHODS[name] = method
    return method


def with_method_defaults(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (recipe keys and flags) completed with the chosen method's defaults for the keys they do
    not set: an explicit value always wins. An unknown method is left for validation to report."""
    from fedcli.config import FIELDS

    algo = values.get("algo", FIELDS["algo"].default)
    method = METHODS.get(algo)
    if method is None:
        return dict(values)
    return {**method.effective_defaults(), **values}


def _load_all() -> None:
    import importlib
    import pkgutil

    import fedcli.fl.algorithms as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{mod.name}")


_load_all()
