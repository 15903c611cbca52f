"""No module of fedcli is imported for its side effect (issue 60): a registry names its built-in entries itself, so
reading one module tells what it holds (the models: ``fedcli.models.zoo.BUILTIN``; the trackers: the package names
its three classes; SCAFFOLD's server is found by its spec, as every part)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_import_is_made_for_what_it_registers():
    found = []
    for path in sorted((ROOT / "fedcli").rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            # only fedcli's own modules (torch.multiprocessing registers the shared-memory pickling of tensors)
            if any(
                m.startswith("fedcli")
                for m in [node.module or "" if isinstance(node, ast.ImportFrom) else ""] + [a.name for a in node.names]
            ):
                comments = " ".join(line.partition("#")[2] for line in lines[node.lineno - 1 : node.end_lineno]).lower()
                if "noqa: f401" in comments and "regist" in comments:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_the_registries_name_their_built_in_entries():
    from fedcli.models.registry import MODELS
    from fedcli.models.zoo import BUILTIN
    from fedcli.trackers import TRACKERS

    assert list(BUILTIN) == [
        "resnet20",
        "wrn",
        "femnist_cnn",
        "cnn4",
        "mlp",
        "resnet18",
        "resnet18-cifar",
        "lamb_cnn",
        "fasttext",
    ]
    assert all(MODELS[n] is f for n, f in BUILTIN.items())
    assert sorted(TRACKERS) == ["mlflow", "tensorboard", "wandb"]
