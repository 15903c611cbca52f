"""Write the FEMNIST sample beside the repo as your own data, in the two formats fedcli reads:

    python examples/own_data.py ../shared/datasets/femnist-leaf-sample data/own

- ``data/own/femnist-digits.npz`` (``--dataset tensors``): x float32 [N, 1, 28, 28], y (0..9), writers (LEAF writer
  ids) and x_test, y_test, writers_test;
- ``data/own/femnist-digits-images/`` (``--dataset imagefolder``): ``train/<digit>/<writer>/<n>.png`` and ``test/...``
  (28x28 grayscale PNGs; the writer subfolders give ``--partition natural`` its writers).

Only the digit classes (labels 0-9) of the first ``--files`` LEAF files are kept, so that it takes seconds.
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image

from fedcli.data._formats import read_leaf_json


def read_split(folder: Path, files: int):
    xs, ys, ws = [], [], []
    for path in sorted(p for p in folder.iterdir() if p.name.endswith((".json", ".json.gz")))[:files]:
        for user, x, y in read_leaf_json(path, 784):
            keep = y < 10  # FEMNIST labels 0-9 are the digits
            xs.append(x[keep].reshape(-1, 1, 28, 28))
            ys.append(y[keep])
            ws += [user] * int(keep.sum())
    return np.concatenate(xs), np.concatenate(ys), np.asarray(ws)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("leaf_dir", type=Path, help="a LEAF FEMNIST data folder with train/ and test/")
    ap.add_argument("out", type=Path, help="folder to write femnist-digits.npz and femnist-digits-images/ into")
    ap.add_argument("--files", type=int, default=6, help="LEAF files per split to read (default 6)")
    args = ap.parse_args()
    train, test = read_split(args.leaf_dir / "train", args.files), read_split(args.leaf_dir / "test", args.files)
    args.out.mkdir(parents=True, exist_ok=True)
    npz = args.out / "femnist-digits.npz"
    np.savez_compressed(npz, x=train[0], y=train[1], writers=train[2], x_test=test[0], y_test=test[1], writers_test=test[2])
    images = args.out / "femnist-digits-images"
    for split, (x, y, w) in (("train", train), ("test", test)):
        for n, (img, label, writer) in enumerate(zip(x, y, w)):
            folder = images / split / str(int(label)) / str(writer)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.round(img[0] * 255).astype(np.uint8), mode="L").save(folder / f"{n}.png")
    print(f"wrote {npz} and {images}: {len(train[1])} training and {len(test[1])} test images of "
          f"{len(set(train[2]))} writers")


if __name__ == "__main__":
    main()
