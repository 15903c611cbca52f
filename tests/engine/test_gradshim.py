"""fedcli.runtime.gradshim: torch.func.grad without importing torch's compiler stack, with the same gradients."""

import subprocess
import sys
import textwrap

import pytest

GRADS = textwrap.dedent("""
    import hashlib, sys
    import torch
    if sys.argv[1] == "real":
        import torch._dynamo  # the compiler stack first: the stand-in steps aside
    from fedcli.fl.trainers import VmapTrainer
    from fedcli.runtime import gradshim
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))
    trainer = VmapTrainer(model)
    params = {n: p.detach().unsqueeze(0).repeat(3, *[1] * p.dim()) for n, p in model.named_parameters()}
    x, y, w = torch.randn(3, 8, 12), torch.randint(0, 5, (3, 8)), torch.ones(3, 8)
    grads, losses = trainer._grad(params, {}, x, y, w)
    digest = hashlib.sha256(b"".join(g.numpy().tobytes() for g in grads.values()) + losses.numpy().tobytes())
    print(digest.hexdigest(), "torch._dynamo" in sys.modules, isinstance(vars(torch)["_dynamo"], gradshim._StandIn))
    if sys.argv[1] == "ask":  # anything else asked of the stand-in imports the real package, which takes its place
        assert torch._dynamo.config is sys.modules["torch._dynamo"].config
        assert not isinstance(vars(torch)["_dynamo"], gradshim._StandIn)
        grads2, _ = trainer._grad(params, {}, x, y, w)  # and torch.func.grad goes on with the real one
        assert all(torch.equal(grads[n], grads2[n]) for n in grads)
        print("forwarded")
""")


def run(mode: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", GRADS, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


@pytest.fixture(scope="module")
def asked() -> list[str]:
    """The "ask" process's output: its first line is what a process that asks nothing more prints (the gradients
    with the stand-in, torch._dynamo not imported), printed before it asks for more; both tests read it."""
    return run("ask")


@pytest.mark.timeout(300)
def test_grad_without_the_compiler_stack_has_the_same_bits(asked):
    shim = asked[:3]
    real = run("real")
    assert shim[1:] == ["False", "True"]  # the gradients were taken and torch._dynamo was never imported
    assert real[1:] == ["True", "False"]  # imported before: no stand-in
    assert shim[0] == real[0]  # the same gradients and losses, bit for bit


@pytest.mark.timeout(300)
def test_the_stand_in_imports_the_real_package_when_asked_for_more(asked):
    assert asked[1:3] == ["False", "True"] and asked[-1] == "forwarded"


def test_disable_switches_the_autograd_compiler_off_and_back():
    import torch

    from fedcli.runtime.gradshim import _disable_compiled_autograd

    engine = torch._C._dynamo.compiled_autograd
    sentinel = object()
    calls = []
    real = engine.set_autograd_compiler

    class Spy:
        def set_autograd_compiler(self, compiler, dynamic):
            calls.append((compiler, dynamic))
            return (sentinel, True) if len(calls) == 1 else (None, False)

    torch._C._dynamo.compiled_autograd = Spy()
    try:
        if "torch._dynamo.compiled_autograd" in sys.modules:
            pytest.skip("torch._dynamo already imported in this process: the real _disable is used")
        with _disable_compiled_autograd():
            assert calls == [(None, False)]
        assert calls == [(None, False), (sentinel, True)]  # the previous compiler and its dynamic flag set back
    finally:
        torch._C._dynamo.compiled_autograd = engine
    assert engine.set_autograd_compiler is real
