"""Your own model: ``--model package.module:Factory`` or ``--model path/to/file.py:Factory``.

The factory is any callable (a function or an ``nn.Module`` class) called as::

    Factory(input_shape, num_classes, **options) -> torch.nn.Module

``input_shape`` is the shape of one sample as a tuple of ints (``(1, 28, 28)`` for MNIST, ``(3, 32, 32)`` for
CIFAR, ``(D,)`` for vectors, ``(L,)`` for token ids), ``num_classes`` an int; the model maps a batch
``[B, *input_shape]`` to logits ``[B, num_classes]``. ``options`` are passed only when the factory takes them by
name or through ``**kwargs``: ``mlp_hidden`` (tuple of ints, ``--mlp-hidden``), ``wrn_depth``, ``wrn_width`` and,
for token-id datasets, ``vocab_size``. The global torch seed is set from ``--seed`` before the call, so the
initial model is a function of the seed.

A module is imported by name (the current folder is searched last); a file is loaded from its path (relative to
the current folder). Nothing about the model is special-cased afterwards: its layers are its
``named_parameters()`` (fedcli/models/layers.py), so FedLAMA's per-layer intervals and communication accounting
apply unchanged. Every problem (import, missing name, a call that fails, something that is not an ``nn.Module``,
logits of the wrong shape, a forward that ``torch.func.vmap`` cannot run) is a :class:`ConfigError` (exit 2).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from fedcli.errors import ConfigError

FORMS = "package.module:Factory or path/to/file.py:Factory"
OPTIONS = ("mlp_hidden", "wrn_depth", "wrn_width", "vocab_size")


def is_factory_ref(name: str) -> bool:
    """Whether ``--model`` names your own factory (``...:Factory``) rather than a registered model."""
    return isinstance(name, str) and ":" in name


def _split(ref: str) -> tuple[str, str, bool]:
    """(module or file, attribute, is a file) of a factory reference (``module:Factory``, ``file.py:Factory``)."""
    target, _, attr = ref.rpartition(":")
    if not target or not attr.isidentifier():
        raise ConfigError(f"--model '{ref}': expected {FORMS}")
    is_file = target.endswith(".py") or "/" in target or os.sep in target
    if not is_file and not all(piece.isidentifier() for piece in target.split(".")):
        raise ConfigError(f"--model '{ref}': '{target}' is neither a module name nor a .py file; expected {FORMS}")
    return target, attr, is_file


def _import(ref: str, target: str, is_file: bool):
    if is_file:
        path = Path(target).expanduser()
        if not path.is_file():
            raise ConfigError(f"--model '{ref}': file {path} not found (relative to {Path.cwd()}); expected {FORMS}")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        name = f"fedcli_model_{path.stem}_{digest}"
        if name in sys.modules:
            return sys.modules[name]
        module_spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up here
        try:
            module_spec.loader.exec_module(module)
        except BaseException as e:
            sys.modules.pop(name, None)
            if isinstance(e, KeyboardInterrupt):
                raise
            raise ConfigError(f"--model '{ref}': importing {path} failed ({type(e).__name__}: {e})") from None
        return module
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # `fedcli` as a console script does not search the current folder
    try:
        return importlib.import_module(target)
    except KeyboardInterrupt:
        raise
    except BaseException as e:
        raise ConfigError(f"--model '{ref}': importing module {target} failed ({type(e).__name__}: {e})") from None


def load_factory(ref: str):
    """The callable a factory reference (``module:Factory`` or ``file.py:Factory``) names."""
    target, attr, is_file = _split(ref)
    module = _import(ref, target, is_file)
    factory = getattr(module, attr, None)
    if factory is None:
        names = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(
            f"--model '{ref}': {target} has no '{attr}' (it defines: {', '.join(names[:12]) or 'nothing callable'})"
        )
    if not callable(factory):
        raise ConfigError(f"--model '{ref}': {target}.{attr} is a {type(factory).__name__}, not a callable factory")
    return factory


def _accepted(factory, options: dict) -> dict:
    """The options the factory takes: all with ``**kwargs``, else those it names."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return dict(options)
    names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in options.items() if k in names}


def build_factory(ref: str, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """Call the factory and check that it built an ``nn.Module`` with trainable parameters."""
    factory = load_factory(ref)
    kwargs = _accepted(factory, {k: v for k, v in options.items() if k in OPTIONS})
    try:
        model = factory(tuple(input_shape), int(num_classes), **kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as e:
        raise ConfigError(
            f"--model '{ref}': calling it as Factory(input_shape={tuple(input_shape)}, num_classes={num_classes}) "
            f"raised {type(e).__name__}: {e}"
        ) from None
    if not isinstance(model, nn.Module):
        raise ConfigError(
            f"--model '{ref}': the factory returned an object of type {type(model).__name__}; expected a "
            f"torch.nn.Module"
        )
    if not any(p.requires_grad for p in model.parameters()):
        raise ConfigError(f"--model '{ref}': the model has no trainable parameters")
    return model


def check_model(
    ref: str, model: nn.Module, input_shape: tuple[int, ...], num_classes: int, *, token_ids: bool, vmap: bool
) -> None:
    """Run the model on two zero samples: logits must be ``[2, num_classes]``; with ``vmap`` (the stacked trainer)
    the forward must also run under ``torch.func.vmap``. The global random state is left untouched."""
    from torch.func import functional_call
    from torch.func import vmap as tvmap

    p0 = next(model.parameters())
    x = torch.zeros((2, *input_shape), dtype=torch.long if token_ids else torch.float32, device=p0.device)
    shown = list(x.shape)
    was = model.training
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        try:
            model.eval()
            out = model(x)
        except Exception as e:
            raise ConfigError(f"--model '{ref}': forward on a batch {shown} raised {type(e).__name__}: {e}") from None
        finally:
            model.train(was)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
            got = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ConfigError(
                f"--model '{ref}': maps a batch {shown} to {got}; expected logits [2, {num_classes}] "
                f"({num_classes} classes)"
            )
        if not vmap:
            return
        params = {n: p.detach().unsqueeze(0).repeat(2, *([1] * p.dim())) for n, p in model.named_parameters()}
        buffers = {n: b.detach().unsqueeze(0).repeat(2, *([1] * b.dim())) for n, b in model.named_buffers()}
        try:
            model.train()
            tvmap(lambda p, b, xb: functional_call(model, (p, b), (xb,)), randomness="different")(
                params, buffers, x.unsqueeze(0).repeat(2, *([1] * x.dim()))
            )
        except Exception as e:
            raise ConfigError(
                f"--model '{ref}': its forward does not run under torch.func.vmap, which the stacked trainer "
                f"uses ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); avoid .item(), in-place "
                f"changes of parameters and data-dependent Python branches, or pass --trainer loop"
            ) from None
        finally:
            model.train(was)


def model_source(ref: str) -> dict:
    """What the manifest records about your own model: the reference as given (under the key ``spec``, the name
    manifests have always used for it), the file it came from and its sha256."""
    if not is_factory_ref(ref):
        return {}
    target, _, is_file = _split(ref)
    try:
        path = Path(target).expanduser() if is_file else Path(inspect.getfile(importlib.import_module(target)))
        return {
            "factory": {
                "spec": ref,
                "file": str(path.resolve()),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        }
    except Exception:
        return {"factory": {"spec": ref}}
