"""Model registry: names on the command line -> builder functions.

A builder has the signature ``builder(input_shape, num_classes, **options) -> nn.Module``;
it picks the options it understands and ignores the others, and raises
:class:`~fedcli.errors.ConfigError` when it cannot take ``input_shape`` or an option value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from fedcli.errors import ConfigError
from fedcli.models.zoo import BUILTIN

ModelBuilder = Callable[..., nn.Module]

#: every model by name: the built-in ones (``fedcli.models.zoo.BUILTIN``) and those added by :func:`register_model`
MODELS: dict[str, ModelBuilder] = dict(BUILTIN)


def register_model(name: str) -> Callable[[ModelBuilder], ModelBuilder]:
    """Class/function decorator: ``@register_model("resnet20")`` adds a builder to :data:`MODELS`."""

    def deco(builder: ModelBuilder) -> ModelBuilder:
        if name in MODELS:
            raise ValueError(f"model {name!r} is registered twice")
        MODELS[name] = builder
        return builder

    return deco


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> nn.Module:
    """Build the registered model ``name`` for inputs of shape ``input_shape`` (one sample, no batch dim).

    ``options`` understood by some models: ``wrn_depth`` (28), ``wrn_width`` (10),
    ``mlp_hidden`` (tuple of ints, default ``(200, 200)``), ``dropout`` (model default).
    Options that do not apply to the chosen model are ignored.

    ``name`` may also be your own factory, ``package.module:Factory`` or ``path/to/file.py:Factory``
    (fedcli/models/custom.py).

    Raises ConfigError for an unknown name, a bad option value, a bad ``num_classes``, or an
    input shape the model cannot take.
    """
    from fedcli.models.custom import FORMS, build_factory, is_factory_ref

    if name not in MODELS and not is_factory_ref(name):
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(sorted(MODELS))}, or your own as {FORMS}")
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise ConfigError(f"model {name!r}: input shape must be a tuple of integers, got {input_shape!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise ConfigError(f"model {name!r}: input shape must be non-empty with positive sizes, got {shape}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError(f"model {name!r}: num_classes must be a positive integer, got {num_classes!r}")
    if is_factory_ref(name):
        return build_factory(name, shape, num_classes, **options)
    return MODELS[name](shape, num_classes, **options)
