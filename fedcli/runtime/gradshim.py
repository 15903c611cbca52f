"""``torch.func.grad`` without importing torch's compiler stack.

Every ``torch.func.grad`` (and ``vjp``) call runs its ``torch.autograd.grad`` inside
``torch._dynamo.compiled_autograd._disable()`` (torch/_functorch/eager_transforms.py, ``_autograd_grad``), and the
attribute access ``torch._dynamo`` imports the whole compiler stack (sympy, the FX passes, Inductor's
configuration): about 150 MB of memory and 0.9 s of CPU in every process of a run (each MPI rank, each ``--workers``
worker), for a context that only switches compiled autograd off for the call. fedcli never compiles anything, and
compiled autograd can only be switched on through ``torch._dynamo``.

:func:`install` puts a stand-in at ``torch._dynamo`` while the package is not imported: its
``compiled_autograd._disable()`` does to the autograd engine what the real one does (no autograd compiler for the
duration, the previous compiler and its dynamic flag set back after), and any other attribute asked of it imports
the real ``torch._dynamo`` and answers from it (the import puts the real package in the stand-in's place). So the
gradients come from the very same ``torch.autograd.grad`` call as before (bitwise: the golden records), and code
that does need the compiler stack gets it.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import types

import torch

REAL = "torch._dynamo"


@contextlib.contextmanager
def _disable_compiled_autograd():
    """Compiled autograd off for the duration (the real package's own ``_disable`` once it is imported)."""
    real = sys.modules.get(f"{REAL}.compiled_autograd")
    if real is not None:
        with real._disable():
            yield
        return
    engine = torch._C._dynamo.compiled_autograd
    prior = engine.set_autograd_compiler(None, False)
    try:
        yield
    finally:
        engine.set_autograd_compiler(*prior)


class _StandIn(types.ModuleType):
    """``torch._dynamo`` until something asks it for more than ``compiled_autograd._disable``."""

    def __getattr__(self, name: str):
        return getattr(importlib.import_module(REAL), name)


def install() -> bool:
    """Put the stand-in at ``torch._dynamo`` (nothing when the package is imported already, or when this torch has
    no ``torch._C._dynamo.compiled_autograd.set_autograd_compiler``); whether it is in place."""
    if REAL in sys.modules or "_dynamo" in vars(torch):
        return isinstance(vars(torch).get("_dynamo"), _StandIn)
    engine = getattr(getattr(torch._C, "_dynamo", None), "compiled_autograd", None)
    if not hasattr(engine, "set_autograd_compiler"):
        return False
    stand_in = _StandIn(REAL, "fedcli's stand-in for torch._dynamo (fedcli.runtime.gradshim)")
    stand_in.compiled_autograd = types.SimpleNamespace(_disable=_disable_compiled_autograd)
    torch._dynamo = stand_in
    return True
