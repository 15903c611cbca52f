"""Declaring options: ``opt`` field metadata and the registry of per-method params dataclasses.

A method (or part) file declares its own hyperparameters as a small dataclass of ``opt`` fields and registers it::

    @register_params
    class FedDynParams:
        feddyn_alpha: float = opt(0.1, "FedDyn: coefficient alpha ...", lo=0.0, lo_open=True, group="method")

:class:`fedcli.config.TrainConfig` is assembled from the general fields of ``fedcli/config.py`` and every
registered params class, so each field is a ``fedcli train`` flag (``--feddyn-alpha``), a recipe key
(``feddyn_alpha``), an entry of the manifest's ``config``, validated by its bounds or choices and read by the
parts as ``cfg.feddyn_alpha``. This module imports nothing of fedcli, so method files import it freely.
"""

from __future__ import annotations

import dataclasses

#: the ``--help`` panels in the order they are shown; a group not listed here comes after them
GROUPS = ("method", "data", "partition", "personalized", "model", "federated", "optimizer", "adaptive", "run", "scale",
          "crash safety")

#: registered params classes, in registration order (method files load in name order)
PARAMS: list[type] = []


def opt(default, help: str, *, choices=None, lo=None, hi=None, lo_open=False, hi_open=False, group="general", multiple=False):
    """A config field with its CLI help and its validation rule (closed or open bounds, or choices); ``multiple``: a
    comma-separated string field whose flag may be repeated (``--tracker a --tracker b`` is ``"a,b"``)."""
    return dataclasses.field(
        default=default,
        metadata={
            "help": help,
            "choices": choices,
            "lo": lo,
            "hi": hi,
            "lo_open": lo_open,
            "hi_open": hi_open,
            "group": group,
            "multiple": multiple,
        },
    )


def register_params(cls: type) -> type:
    """Make ``cls`` a dataclass of ``opt`` fields and add its fields to the config (class decorator).

    A params class may define ``check(self)``, called by ``TrainConfig.validate`` after the per-field checks, for
    rules between its fields; it raises ``ConfigError(message, key=...)``. A field name another params class
    already declared is a programming error (TypeError at import)."""
    if not dataclasses.is_dataclass(cls):
        cls = dataclasses.dataclass(cls)
    if cls in PARAMS:
        return cls
    taken = {f.name: p for p in PARAMS for f in dataclasses.fields(p)}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            raise TypeError(f"{cls.__qualname__}.{f.name}: declare params fields with fedcli.params.opt(...)")
        if f.name in taken:
            raise TypeError(f"{cls.__qualname__}.{f.name}: the option is already declared by {taken[f.name].__qualname__}")
    PARAMS.append(cls)
    return cls


def group_rank(f) -> int:
    """Position of a field's help panel (``GROUPS`` order; other groups after them)."""
    g = f.metadata.get("group")
    return GROUPS.index(g) if g in GROUPS else len(GROUPS)
