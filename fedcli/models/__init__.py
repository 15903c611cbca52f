"""Model zoo and the "layers" contract.

Public API::

    MODELS                      # name -> builder registry
    register_model(name)        # decorator adding a builder
    build_model(name, input_shape, num_classes, **options) -> nn.Module
    LayerInfo, layer_info(model, buffers_with="weight") -> list[LayerInfo]

Models: ``mlp``, ``cnn4``, ``femnist_cnn``, ``lamb_cnn``, ``resnet20``, ``wrn``, ``resnet18``.
"""

from fedcli.models.layers import KINDS, LayerInfo, layer_info
from fedcli.models.registry import MODELS, build_model, register_model

__all__ = ["KINDS", "MODELS", "LayerInfo", "build_model", "layer_info", "register_model"]
