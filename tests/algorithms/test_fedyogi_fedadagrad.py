"""FedYogi and FedAdagrad (Reddi et al., ICLR 2021, "Adaptive Federated Optimization", Algorithm 2): the server's
update worked out by hand over two rounds on a two-element layer, and the presets' defaults.

Both servers are FedAdam's (``fedcli.fl.algorithms.fedadam.AdamServer``) with another second moment v, started at
v_{-1} = tau^2; each test's numbers would differ under Adam's v (from 0 or from tau^2), so a server that fell back
to Adam's rule fails here.
"""

import math
import re
from pathlib import Path

import torch

from fedcli.config import TrainConfig
from fedcli.fl.algorithms.fedadagrad import AdagradServer
from fedcli.fl.algorithms.fedyogi import YogiServer
from fedcli.fl.parts import SERVERS
from fedcli.recipes import build_config
from fedcli.specs import METHODS


def two_rounds(server, x0, avg0, shift1):
    """Round 1 averages to ``avg0``; round 2's average is x1 + ``shift1``. Returns x1, v after round 1, x2, v after
    2."""
    x1 = server.update("w", torch.tensor(x0), torch.tensor(avg0))
    v1 = server.v["w"].clone()
    x2 = server.update("w", x1, x1 + torch.tensor(shift1))
    return x1, v1, x2, server.v["w"]


def test_yogi_server_two_rounds_by_hand():
    """b1 = 0.5, b2 = 0.25 (1 - b2 = 0.75), eta = 0.3, tau = 0.1, so v_{-1} = tau^2 = 0.01; x_0 = [1, 2].

    Round 1, average [1.2, 2.05]: Delta_0 = [0.2, 0.05], Delta_0^2 = [0.04, 0.0025].
      m_0 = 0.5 Delta_0 = [0.1, 0.025]
      v_0 = 0.01 - 0.75 Delta_0^2 sign(0.01 - Delta_0^2):
            element 0: sign(0.01 - 0.04) = -1, v grows:   0.01 + 0.75 * 0.04   = 0.04
            element 1: sign(0.01 - 0.0025) = +1, v shrinks: 0.01 - 0.75 * 0.0025 = 0.008125
      x_1 = x_0 + 0.3 m_0 / (sqrt(v_0) + 0.1):
            element 0: 1 + 0.3 * 0.1 / (0.2 + 0.1)                = 1.1
            element 1: 2 + 0.3 * 0.025 / (0.0901388 + 0.1)         = 2 + 0.0075 / 0.1901388 = 2.0394449
    Round 2, average x_1 (Delta_1 = 0): m_1 = 0.5 m_0 = [0.05, 0.0125]; sign(v_0 - 0) = +1 and Delta_1^2 = 0, so
      v_1 = v_0 (Yogi's v holds still where Adam's would decay to b2 v_0 = [0.01, 0.00203125])
      x_2 = x_1 + 0.3 m_1 / (sqrt(v_1) + 0.1) = [1.1 + 0.015 / 0.3, 2.0394449 + 0.00375 / 0.1901388]
          = [1.15, 2.0591673]
    Adam's rule would give x_1 = [1.1098076, 2.0523373] (v from 0) or [1.1070368, 2.0451416] (v from tau^2).
    """
    server = YogiServer(TrainConfig(beta1=0.5, beta2=0.25, server_lr=0.3, server_eps=0.1))
    x1, v1, x2, v2 = two_rounds(server, [1.0, 2.0], [1.2, 2.05], [0.0, 0.0])
    torch.testing.assert_close(v1, torch.tensor([0.04, 0.008125]))
    torch.testing.assert_close(x1, torch.tensor([1.1, 2.0394449]))
    torch.testing.assert_close(server.m["w"], torch.tensor([0.05, 0.0125]))
    torch.testing.assert_close(v2, torch.tensor([0.04, 0.008125]))
    torch.testing.assert_close(x2, torch.tensor([1.15, 2.0591673]))


def test_adagrad_server_two_rounds_by_hand():
    """b1 = 0 (FedAdagrad's default: m_t = Delta_t), eta = 0.6, tau = 0.3, so v_{-1} = tau^2 = 0.09; x_0 = [1, 2].

    Round 1, average [1.4, 2.0]: Delta_0 = [0.4, 0], m_0 = Delta_0.
      v_0 = v_{-1} + Delta_0^2 = [0.09 + 0.16, 0.09 + 0] = [0.25, 0.09]      (sqrt: [0.5, 0.3])
      x_1 = x_0 + 0.6 m_0 / (sqrt(v_0) + 0.3) = [1 + 0.24 / 0.8, 2 + 0] = [1.3, 2.0]
    Round 2, average x_1 + [1.2, 0.4]: Delta_1 = m_1 = [1.2, 0.4].
      v_1 = v_0 + Delta_1^2 = [0.25 + 1.44, 0.09 + 0.16] = [1.69, 0.25]      (sqrt: [1.3, 0.5])
      x_2 = x_1 + 0.6 m_1 / (sqrt(v_1) + 0.3) = [1.3 + 0.72 / 1.6, 2.0 + 0.24 / 0.8] = [1.75, 2.3]
    beta2 (0.999 here) plays no part; with Adam's v_0 = 0.001 * Delta_0^2 element 0 would move by 0.6 * 0.4 / 0.3126 =
    0.768.
    """
    server = AdagradServer(TrainConfig(beta1=0.0, beta2=0.999, server_lr=0.6, server_eps=0.3))
    x1, v1, x2, v2 = two_rounds(server, [1.0, 2.0], [1.4, 2.0], [1.2, 0.4])
    torch.testing.assert_close(v1, torch.tensor([0.25, 0.09]))
    torch.testing.assert_close(x1, torch.tensor([1.3, 2.0]))
    torch.testing.assert_close(v2, torch.tensor([1.69, 0.25]))
    torch.testing.assert_close(x2, torch.tensor([1.75, 2.3]))


def test_presets_use_their_servers_and_the_papers_defaults():
    """The EMNIST CR settings of the docstrings (client lr, server lr eta, tau) and each method's own betas."""
    assert SERVERS[METHODS["fedyogi"].server] is YogiServer and SERVERS[METHODS["fedadagrad"].server] is AdagradServer
    yogi, adagrad, adam = (build_config(None, {"algo": a}) for a in ("fedyogi", "fedadagrad", "fedadam"))
    assert (yogi.lr, yogi.server_lr, yogi.server_eps, yogi.beta1, yogi.beta2) == (0.0316, 0.00316, 1e-4, 0.9, 0.99)
    assert (adagrad.lr, adagrad.server_lr, adagrad.server_eps, adagrad.beta1) == (0.0316, 0.1, 1e-2, 0.0)
    assert adam.beta2 == 0.999  # FedYogi's b2 is its own, not the general default FedAdam keeps
    assert math.isclose(yogi.lr, 10**-1.5, rel_tol=1e-3) and math.isclose(yogi.server_lr, 10**-2.5, rel_tol=1e-3)
    assert build_config(None, {"algo": "fedyogi", "beta2": 0.9}).beta2 == 0.9  # a flag or recipe key wins


def test_the_contract_page_shows_fedyogi_as_it_is():
    """docs/method-contract.md shows FedYogi's spec and part file whole as its worked example: the page must not drift
    from the files."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs/method-contract.md").read_text()
    for path in ("fedcli/specs/fedyogi.py", "fedcli/fl/algorithms/fedyogi.py"):
        source = (root / path).read_text()
        assert f"```python\n{source}```" in page, path
        assert len(source.splitlines()) <= 60, path
    assert len((root / "fedcli/fl/algorithms/fedadagrad.py").read_text().splitlines()) <= 60


def test_the_contract_page_shows_feddyn_whole_and_counts_the_names_an_author_learns():
    """docs/method-contract.md shows FedDyn's two files whole (the client-state example), and its table of the names
    an author learns counts them right: at most 12 for a server from scratch (issue 49), and every name of the FedDyn
    row is one the FedDyn files use."""
    root = Path(__file__).resolve().parents[2]
    page = (root / "docs/method-contract.md").read_text()
    dyn = ""
    for path in ("fedcli/specs/feddyn.py", "fedcli/fl/algorithms/feddyn.py"):
        source = (root / path).read_text()
        assert f"```python\n{source}```" in page, path
        dyn += source
    rows = {}
    for line in page.splitlines():
        m = re.match(
            r"\| (a server optimizer from scratch|a client method with per-client state[^|]*) \| (.*?) \| "
            r"\*\*(\d+)\*\*",
            line,
        )
        if m:
            rows[m.group(1).split(" (")[0]] = (re.findall(r"`([^`]+)`", m.group(2)), int(m.group(3)))
    (server, n_server), (client, n_client) = (
        rows["a server optimizer from scratch"],
        rows["a client method with per-client state and a server"],
    )
    assert len(server) == n_server <= 12 and len(client) == n_client
    for name in client:
        assert name.rstrip("=").split(".")[-1] in dyn, name
