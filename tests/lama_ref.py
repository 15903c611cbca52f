"""Independent re-implementations of FedLAMA's interval adjustment, for tests to compare fedcli against.

Written from the papers and from the behaviour of the authors' code (not from fedcli's helpers), in the
shape those sources have: one loop, plain Python, intervals in multiples of tau'.
"""


def paper_algorithm1(d, dims, phi):
    """AAAI Algorithm 1 as printed: I = argsort(d); for l = 1..L, layer I[l] gets phi iff delta_l < 1 - lambda_l
    (Eqs. 3 and 4 over all L layers), else 1. Returns multiples of tau'."""
    order = sorted(range(len(d)), key=lambda i: d[i])  # Python's sort is stable: ties keep layer order
    total_disc = sum(d[i] * dims[i] for i in range(len(d)))
    total_dim = sum(dims)
    out = [1] * len(d)
    for l in range(1, len(d) + 1):
        first = order[:l]
        delta = sum(d[i] * dims[i] for i in first) / total_disc if total_disc else 0.0
        lam = sum(dims[i] for i in first) / total_dim
        out[order[l - 1]] = phi if delta < 1 - lam else 1
    return out


def author_rule(d, dims, kinds, phi):
    """The authors' code's adjustment: reset every interval to 1; walk the tensors by increasing d, skipping
    the ones that are not conv/dense kernels; add the walked kernel's d*dim to a running sum (divided by
    the sum of d*dim over *all* tensors) and its dim to another (divided by the kernels' total dim); mark it
    as a long-interval tensor; stop once 1 - lambda < delta (strict). Marked tensors get phi."""
    out = [1] * len(d)
    kernel_dim = sum(n for n, k in zip(dims, kinds) if k == "kernel")
    all_disc = sum(x * n for x, n in zip(d, dims))
    run_disc = run_dim = 0
    marked = []
    for i in sorted(range(len(d)), key=lambda i: d[i]):
        if kinds[i] != "kernel":
            continue
        run_disc += d[i] * dims[i]
        run_dim += dims[i]
        delta = run_disc / all_disc if all_disc else float("nan")  # the code divides 0 by 0: nan never breaks
        lam = run_dim / kernel_dim
        marked.append(i)
        if (1 - lam) < delta:
            break
    for i in marked:
        out[i] = phi
    return out


def author_adjusts_after(tau, phi, epochs):
    """Iterations (counted from the start) after which the authors' code re-adjusts: its epoch e (0-based) is
    tau' local iterations, it adjusts after epoch e when (e + 1) % phi == 0 and e > 5."""
    return [(e + 1) * tau for e in range(epochs) if (e + 1) % phi == 0 and e > 5]
