"""Tests for fedcli.models: shapes, parameter counts, the layers contract, torch.func compatibility."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedcli.errors import ConfigError
from fedcli.models import KINDS, MODELS, LayerInfo, build_model, layer_info

# Small configurations of every model (name, input shape, options) used by the generic tests.
SMALL = [
    ("resnet20", (3, 32, 32), {}),
    ("wrn", (3, 32, 32), {"wrn_depth": 10, "wrn_width": 1}),
    ("resnet18", (3, 32, 32), {}),
    ("femnist_cnn", (1, 28, 28), {}),
    ("cnn4", (1, 28, 28), {}),
    ("cnn4", (3, 32, 32), {}),
    ("lamb_cnn", (1, 28, 28), {}),
    ("mlp", (1, 28, 28), {}),
    ("mlp", (60,), {}),
]
IDS = [f"{n}-{'x'.join(map(str, s))}" for n, s, _ in SMALL]


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def stack(dicts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([d[k] for d in dicts]) for k in dicts[0]}


def client_states(model: nn.Module, k: int, gen: torch.Generator):
    """K perturbed copies of the parameters and buffers (float buffers perturbed too, counters offset)."""
    params, buffers = [], []
    for i in range(k):
        params.append(
            {
                n: p.detach() + 0.05 * torch.randn(p.shape, generator=gen, dtype=p.dtype)
                for n, p in model.named_parameters()
            }
        )
        bufs = {}
        for n, b in model.named_buffers():
            if b.is_floating_point():
                noise = 0.1 * torch.rand(b.shape, generator=gen, dtype=b.dtype)
                bufs[n] = b.detach() + noise  # keeps running_var positive
            else:
                bufs[n] = b.detach().clone() + i
        buffers.append(bufs)
    return params, buffers


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / (b.norm() + 1e-12)).item()


# ----------------------------------------------------------------------------- registry, shapes


def test_registry_has_cli_names():
    assert {"mlp", "cnn4", "femnist_cnn", "lamb_cnn", "resnet20", "wrn", "resnet18"} <= set(MODELS)


@pytest.mark.parametrize(("name", "shape", "opts"), SMALL, ids=IDS)
def test_forward_shape(name, shape, opts):
    torch.manual_seed(0)
    model = build_model(name, shape, 7, **opts)
    for mode in (model.train, model.eval):
        mode()
        out = model(torch.randn(2, *shape))
        assert out.shape == (2, 7)
        assert torch.isfinite(out).all()


# ----------------------------------------------------------------------------- parameter counts


def test_param_count_femnist_cnn():
    # 832 + 51,264 + (3136*2048 + 2048) + (2048*62 + 62), Caldas et al. / LEAF
    assert n_params(build_model("femnist_cnn", (1, 28, 28), 62)) == 6_603_710


def test_param_count_cnn4():
    # 832 + 51,264 + (1024*512 + 512) + (512*10 + 10), PFLlib FedAvgCNN with dim=1024
    assert n_params(build_model("cnn4", (1, 28, 28), 10)) == 582_026
    # flatten 1600 on 3x32x32 (PFLlib's dim=1600 for CIFAR-10)
    assert build_model("cnn4", (3, 32, 32), 10).fc1.in_features == 1600


def test_param_count_resnet20():
    # Option A (parameter-free shortcuts) would give 269,722 (He et al.: 0.27M); option B adds the two
    # 1x1 conv + BN projections: (16*32 + 2*32) + (32*64 + 2*64) = 2,752.
    assert n_params(build_model("resnet20", (3, 32, 32), 10)) == 272_474


def test_param_count_lamb_cnn_and_mlp():
    model = build_model("lamb_cnn", (1, 28, 28), 10)
    assert model.fc1.in_features == 320
    assert n_params(model) == 21_840
    # McMahan's 2NN: 784*200 + 200 + 200*200 + 200 + 200*10 + 10
    assert n_params(build_model("mlp", (1, 28, 28), 10)) == 199_210
    assert n_params(build_model("mlp", (60,), 3, mlp_hidden=(8,))) == 60 * 8 + 8 + 8 * 3 + 3
    assert n_params(build_model("mlp", (60,), 3, mlp_hidden=())) == 60 * 3 + 3


def test_param_count_wrn_28_10_on_meta():
    with torch.device("meta"):
        model = build_model("wrn", (3, 32, 32), 100)
    assert next(model.parameters()).device.type == "meta"
    assert n_params(model) == 36_536_884  # WRN-28-10, CIFAR-100: 36.5M (Zagoruyko & Komodakis Table)
    assert len([m for m in model.modules() if m.__class__.__name__ == "_WideBlock"]) == 12


def test_resnet18_adapts_channels():
    model = build_model("resnet18", (1, 28, 28), 10)
    assert model.conv1.in_channels == 1
    assert all(not m.inplace for m in model.modules() if isinstance(m, nn.ReLU))
    assert model.fc.out_features == 10


# ----------------------------------------------------------------------------- options and errors


def test_unknown_model():
    with pytest.raises(ConfigError, match=r"unknown model 'nope'; choose one of: .*resnet20") as e:
        build_model("nope", (3, 32, 32), 10)
    assert e.value.exit_code == 2


@pytest.mark.parametrize(
    ("name", "shape"),
    [("femnist_cnn", (1, 8, 8)), ("cnn4", (1, 8, 8)), ("lamb_cnn", (1, 12, 12)), ("resnet20", (60,)), ("wrn", (1, 28))],
)
def test_bad_input_shape(name, shape):
    with pytest.raises(ConfigError) as e:
        build_model(name, shape, 10)
    msg = str(e.value)
    assert repr(name) in msg and str(list(shape)) in msg


@pytest.mark.parametrize(
    ("name", "opts", "key"),
    [
        ("wrn", {"wrn_depth": 27}, "wrn_depth"),
        ("wrn", {"wrn_depth": 4}, "wrn_depth"),
        ("wrn", {"wrn_depth": 10, "wrn_width": 0}, "wrn_width"),
        ("wrn", {"wrn_depth": 10, "dropout": 1.5}, "dropout"),
        ("mlp", {"mlp_hidden": (200, -1)}, "mlp_hidden"),
        ("mlp", {"mlp_hidden": "200"}, "mlp_hidden"),
    ],
)
def test_bad_options(name, opts, key):
    with pytest.raises(ConfigError, match=key):
        build_model(name, (3, 32, 32), 10, **opts)


def test_bad_num_classes():
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("mlp", (60,), 0)


def test_irrelevant_options_ignored_and_dropout_option():
    model = build_model("cnn4", (1, 28, 28), 10, wrn_depth=27, mlp_hidden="x", dropout=0.3)
    assert n_params(model) == 582_026
    wide = build_model("wrn", (3, 32, 32), 10, wrn_depth=10, wrn_width=1, dropout=0.3)
    assert any(isinstance(m, nn.Dropout) and m.p == 0.3 for m in wide.modules())
    lamb = build_model("lamb_cnn", (1, 28, 28), 10)
    assert isinstance(lamb.conv2_drop, nn.Dropout2d) and lamb.conv2_drop.p == 0.5
    no_drop = build_model("lamb_cnn", (1, 28, 28), 10, dropout=0)
    assert not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in no_drop.modules())


# ----------------------------------------------------------------------------- layer_info


@pytest.mark.parametrize(("name", "shape", "opts"), SMALL, ids=IDS)
def test_layer_info_contract(name, shape, opts):
    model = build_model(name, shape, 10, **opts)
    layers = layer_info(model)
    named = list(model.named_parameters())
    assert [l.name for l in layers] == [n for n, _ in named]
    assert [l.index for l in layers] == list(range(len(named)))
    assert all(l.shape == tuple(p.shape) and l.numel == p.numel() for l, (_, p) in zip(layers, named))
    assert sum(l.numel for l in layers) == n_params(model)
    assert all(l.kind in KINDS for l in layers)
    attached = [b for l in layers for b in l.buffers]
    assert sorted(attached) == sorted(n for n, _ in model.named_buffers())  # each buffer exactly once
    for l in layers:  # buffers sit on the weight of their own module
        for b in l.buffers:
            assert b.rsplit(".", 1)[0] == l.name.rsplit(".", 1)[0] and l.name.endswith("weight")


def test_layer_info_kinds_and_buffers_resnet20():
    layers = {l.name: l for l in layer_info(build_model("resnet20", (3, 32, 32), 10))}
    assert layers["conv1.weight"].kind == "kernel" and layers["conv1.weight"].buffers == ()
    assert layers["bn1.weight"].kind == "norm"
    assert layers["bn1.bias"].kind == "norm" and layers["bn1.bias"].buffers == ()
    assert layers["bn1.weight"].buffers == ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked")
    assert layers["layer2.0.shortcut.0.weight"].kind == "kernel"
    assert layers["layer2.0.shortcut.1.weight"].buffers[0] == "layer2.0.shortcut.1.running_mean"
    assert layers["fc.weight"].kind == "kernel" and layers["fc.bias"].kind == "bias"
    assert isinstance(layers["fc.bias"], LayerInfo) and layers["fc.bias"].shape == (10,)


def test_layer_info_conv_bias_and_buffers_with_bias():
    layers = {l.name: l for l in layer_info(build_model("femnist_cnn", (1, 28, 28), 62))}
    assert layers["conv1.weight"].kind == "kernel" and layers["conv1.bias"].kind == "bias"
    assert layers["conv1.weight"].numel == 32 * 25
    by_bias = {l.name: l for l in layer_info(build_model("resnet20", (3, 32, 32), 10), buffers_with="bias")}
    assert by_bias["bn1.weight"].buffers == ()
    assert by_bias["bn1.bias"].buffers == ("bn1.running_mean", "bn1.running_var", "bn1.num_batches_tracked")
    with pytest.raises(ValueError):
        layer_info(nn.Linear(2, 2), buffers_with="nope")


def test_layer_info_parameterless_norm_and_layernorm():
    model = nn.Sequential(
        nn.BatchNorm1d(4, affine=False), nn.Linear(4, 3), nn.LayerNorm(3), nn.BatchNorm1d(3, affine=False)
    )
    layers = layer_info(model)
    assert [l.kind for l in layers] == ["kernel", "bias", "norm", "norm"]
    assert layers[0].buffers == ("0.running_mean", "0.running_var", "0.num_batches_tracked")
    assert layers[3].buffers == ("3.running_mean", "3.running_var", "3.num_batches_tracked")  # nearest before
    assert sum(len(l.buffers) for l in layers) == len(list(model.named_buffers()))


# ----------------------------------------------------------------------------- torch.func / vmap


def _loss_fn(model):
    def loss(params, buffers, x, y):
        return F.cross_entropy(functional_call(model, (params, buffers), (x,)), y)

    return loss


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_vmap_grad_resnet20_batchnorm_train(dtype):
    """vmap(grad) over K stacked clients equals K plain backward passes, BN running stats included.

    Exact agreement is checked in float64. In float32 the vmapped (grouped) convolutions round
    differently, and a pre-ReLU value within ~1e-7 of zero (this seed has one at 1.7e-7 in
    layer1.1.bn1) can flip its ReLU mask, which moves lower-layer gradients by a few percent;
    there only the running statistics (forward values) are held to float32 precision.
    """
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = build_model("resnet20", (3, 8, 8), 10).to(dtype).train()
    k, b = 3, 4
    params, buffers = client_states(model, k, gen)
    sp, sb = stack(params), stack(buffers)
    before = {n: t.clone() for n, t in sb.items()}
    x = torch.randn(k, b, 3, 8, 8, generator=gen, dtype=dtype)
    y = torch.randint(0, 10, (k, b), generator=gen)

    grads = vmap(grad(_loss_fn(model)))(sp, sb, x, y)

    assert not torch.equal(before["bn1.running_mean"], sb["bn1.running_mean"])  # updated in place
    assert sb["bn1.num_batches_tracked"].tolist() == [1, 2, 3]
    tol = 1e-10 if dtype == torch.float64 else 5e-2
    for i in range(k):
        ref = copy.deepcopy(model)
        ref.load_state_dict({**params[i], **buffers[i]})
        F.cross_entropy(ref(x[i]), y[i]).backward()
        for n, p in ref.named_parameters():
            assert grads[n].shape == (k, *p.shape) and grads[n].dtype == dtype
            assert rel_err(grads[n][i], p.grad) < tol, n
        for n, buf in ref.named_buffers():
            torch.testing.assert_close(sb[n][i], buf, msg=n)


def test_vmap_grad_lamb_cnn_dropout():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(2)
    model = build_model("lamb_cnn", (1, 28, 28), 10).train()
    k = 3
    params, buffers = client_states(model, k, gen)
    x = torch.randn(k, 4, 1, 28, 28, generator=gen)
    y = torch.randint(0, 10, (k, 4), generator=gen)
    grads = vmap(grad(_loss_fn(model)), randomness="different")(stack(params), stack(buffers), x, y)
    for n, p in model.named_parameters():
        assert grads[n].shape == (k, *p.shape) and torch.isfinite(grads[n]).all()
    # Without dropout the model makes no random call (vmap's default randomness="error" passes) and
    # the gradients match plain backward (float64, see the resnet20 test for why).
    plain = build_model("lamb_cnn", (1, 28, 28), 10, dropout=0.0).double().train()
    params, buffers = client_states(plain, k, gen)
    x = x.double()
    grads = vmap(grad(_loss_fn(plain)))(stack(params), stack(buffers), x, y)
    for i in range(k):
        ref = copy.deepcopy(plain)
        ref.load_state_dict(params[i])
        F.cross_entropy(ref(x[i]), y[i]).backward()
        for n, p in ref.named_parameters():
            assert rel_err(grads[n][i], p.grad) < 1e-10, n


VMAP_SMALL = [
    ("wrn", (3, 8, 8), {"wrn_depth": 10, "wrn_width": 1}),
    ("resnet18", (3, 32, 32), {}),
    ("femnist_cnn", (1, 28, 28), {}),
    ("cnn4", (1, 28, 28), {}),
    ("mlp", (60,), {"mlp_hidden": (16, 16)}),
]


@pytest.mark.parametrize(("name", "shape", "opts"), VMAP_SMALL, ids=[v[0] for v in VMAP_SMALL])
def test_vmap_grad_all_models_float64(name, shape, opts):
    """Every model runs under vmap(grad(functional_call)) in train mode and eval mode.

    float64, because float32 rounding can flip ReLU masks (see the resnet20 test); resnet18 on 32x32
    with a batch of 2 normalizes 1x1 feature maps over 2 values, where float32 per-client and vmapped
    gradients differ by up to ~20% (float64: 1e-9).
    """
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(3)
    model = build_model(name, shape, 5, **opts).double().train()
    k, b = 2, 2
    params, buffers = client_states(model, k, gen)
    sp, sb = stack(params), stack(buffers)
    x = torch.randn(k, b, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 5, (k, b), generator=gen)
    grads = vmap(grad(_loss_fn(model)))(sp, sb, x, y)
    model.eval()
    out = vmap(lambda p, bf, xx: functional_call(model, (p, bf), (xx,)))(sp, sb, x)
    for i in range(k):
        ref = copy.deepcopy(model).train()
        ref.load_state_dict({**params[i], **buffers[i]})
        F.cross_entropy(ref(x[i]), y[i]).backward()
        for n, p in ref.named_parameters():
            assert rel_err(grads[n][i], p.grad) < 1e-8, n
        for n, buf in ref.named_buffers():
            torch.testing.assert_close(sb[n][i], buf, msg=n)
        ref.eval()
        torch.testing.assert_close(out[i], ref(x[i]))
