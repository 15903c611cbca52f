"""Readers for the on-disk dataset formats (numpy only, no per-sample Python loops).

- IDX (the MNIST family, http://yann.lecun.com/exdb/mnist/), gzip or plain.
- CIFAR python pickles (https://www.cs.toronto.edu/~kriz/cifar.html), read with a restricted unpickler.
- LEAF JSON (Caldas et al., "LEAF: A Benchmark for Federated Settings", 2018), plain or gzip.
- CSV tables of numbers (scikit-learn's bundled ``digits.csv.gz``).

Every problem is reported as one ``DataError`` sentence: ``<path>: <what is wrong>; expected <format>``.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json
import os
import pickle
import re
import time
import warnings
import zlib
from pathlib import Path

import numpy as np

from fedcli.errors import DataError

IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801
_IDX_FORMAT = {
    IDX_IMAGES_MAGIC: "an IDX image file (magic 0x00000803, uint8 [N, H, W])",
    IDX_LABELS_MAGIC: "an IDX label file (magic 0x00000801, uint8 [N])",
}


def read_bytes(path: Path, expected: str) -> bytes:
    """Read a file, transparently gunzipping ``*.gz`` (or anything starting with the gzip magic)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); expected {expected}") from None
    if path.suffix == ".gz" or raw[:2] == b"\x1f\x8b":
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise DataError(f"{path}: corrupt gzip stream ({e}); expected {expected} compressed with gzip") from None
    return raw


# ------------------------------------------------------------------------------- kept for the process

#: the most bytes of parsed arrays a process keeps (:func:`kept`); a larger file is parsed at every load
KEEP_BYTES = 256 * 2**20
#: a file modified less than this many seconds before it was read is not kept: a second write in the same tick of the
#: file system's clock could leave its size and time as they were (git's "racy" rule)
RACY_S = 2.0
_KEPT: collections.OrderedDict = collections.OrderedDict()  # (reader, path, args) -> (stamp, arrays, bytes)


def _arrays(value) -> list:
    if isinstance(value, np.ndarray):
        return [value]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _arrays(v)]
    return []


def kept(reader):
    """``reader(path, *args)`` whose parsed arrays this process keeps while the file is unchanged (its device, inode,
    size and modification time), read-only, the least recently used dropped past :data:`KEEP_BYTES`: a process that
    loads the same data again (the Python API in a notebook, a test process) parses it once. A file written in the
    last :data:`RACY_S` seconds is read but not kept. The result's lists are new at every call."""

    @functools.wraps(reader)
    def read(path: Path, *args):
        try:
            st = os.stat(path)
        except OSError:
            return reader(path, *args)  # the reader says what is wrong
        key, stamp = (reader.__name__, os.fspath(path), args), (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        hit = _KEPT.pop(key, None)  # a file changed since: its old arrays are dropped
        if hit is not None and hit[0] == stamp:
            _KEPT[key] = hit  # the most recently used, last
            return _copy_lists(hit[1])
        value = reader(path, *args)
        arrays = _arrays(value)
        size = sum(a.nbytes for a in arrays)
        if time.time() - st.st_mtime >= RACY_S and size <= KEEP_BYTES:
            for a in arrays:
                a.setflags(write=False)
            _KEPT[key] = (stamp, value, size)
            while sum(v[2] for v in _KEPT.values()) > KEEP_BYTES:
                _KEPT.popitem(last=False)
            return _copy_lists(value)
        return value

    return read


def _copy_lists(value):
    return [_copy_lists(v) for v in value] if isinstance(value, list) else value


# ------------------------------------------------------------------------------------------ CSV


@kept
def read_number_table(path: Path) -> np.ndarray:
    """A comma-separated table of numbers (plain or gzip, no header) as a float64 array [rows, columns]."""
    return np.loadtxt(path, delimiter=",")


# ----------------------------------------------------------------------------------------- IDX


@kept
def read_idx(path: Path, magic: int) -> np.ndarray:
    """Read an IDX file of unsigned bytes and return a read-only uint8 array of its declared shape.

    ``magic`` is 0x00000803 (images, [N, H, W]) or 0x00000801 (labels, [N]).
    The header is a big-endian int32 magic followed by one big-endian int32 size per dimension.
    """
    expected = _IDX_FORMAT[magic]
    data = read_bytes(path, expected)
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(
            f"{path}: file is {len(data)} bytes, shorter than the {header}-byte IDX header; expected {expected}"
        )
    found = int.from_bytes(data[:4], "big")
    if found != magic:
        raise DataError(f"{path}: wrong magic number 0x{found:08x}; expected {expected}")
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    need = int(np.prod(shape, dtype=np.int64))
    have = len(data) - header
    if have != need:
        what = "truncated" if have < need else "has trailing bytes"
        raise DataError(
            f"{path}: {what}: header declares shape {list(shape)} ({need} bytes of data) "
            f"but the file holds {have}; expected {expected}"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(shape)


# --------------------------------------------------------------------------------------- CIFAR

_CIFAR_ALLOWED = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickler that only builds plain containers and numpy arrays (no arbitrary code)."""

    def find_class(self, module, name):
        if (module, name) not in _CIFAR_ALLOWED:
            raise pickle.UnpicklingError(f"global '{module}.{name}' is not allowed")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            return super().find_class(module, name)


def read_cifar_batch(path: Path, label_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR python batch: ``{b"data": uint8 [N, 3072], b"<label_key>": [N]}``.

    Returns images uint8 [N, 3, 32, 32] and labels int64 [N] (keys may be bytes or str).
    """
    expected = f"a CIFAR python pickle (dict with 'data' uint8 [N, 3072] and '{label_key}' [N])"
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="bytes").load()
    except OSError as e:
        raise DataError(f"{path}: cannot be read ({e.strerror or e}); expected {expected}") from None
    except Exception as e:  # any unpickling failure means a corrupt or foreign file
        raise DataError(f"{path}: not a readable pickle ({type(e).__name__}: {e}); expected {expected}") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: pickle holds a {type(obj).__name__}, not a dict; expected {expected}")
    obj = {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in obj.items()}
    for key in ("data", label_key):
        if key not in obj:
            raise DataError(f"{path}: missing key '{key}'; expected {expected}")
    data = obj["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
        desc = f"{data.dtype} {list(data.shape)}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataError(f"{path}: 'data' is {desc}; expected {expected}")
    try:
        labels = np.asarray(obj[label_key])
    except Exception:  # ragged or odd objects
        labels = np.empty(0, dtype=object)
    if labels.ndim != 1 or labels.shape[0] != data.shape[0] or labels.dtype.kind not in "iu":
        raise DataError(f"{path}: '{label_key}' is not a list of {data.shape[0]} integers; expected {expected}")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


# ---------------------------------------------------------------------------------------- LEAF

LEAF_FORMAT = (
    'LEAF JSON ({"users": [...], "num_samples": [...], "user_data": {user: {"x": [[784 floats], ...], "y": [...]}}})'
)
# `"x": [` opens a list of feature rows; its numeric body is cut out and parsed by numpy.
_X_OPEN = re.compile(rb'"x"\s*:\s*\[')
_X_EMPTY = re.compile(rb"\s*\]")
_X_CLOSE = re.compile(rb"\]\s*\]")
# Character classes for the numeric body of an "x" array (anything else is invalid).
_SPACE, _OPEN, _CLOSE, _COMMA, _DIGIT, _DOT, _MINUS, _EXP, _INVALID = range(9)
_CLASS = np.full(256, _INVALID, dtype=np.uint8)
for _chars, _code in (
    (b" \t\r\n", _SPACE),
    (b"[", _OPEN),
    (b"]", _CLOSE),
    (b",", _COMMA),
    (b"0123456789", _DIGIT),
    (b".", _DOT),
    (b"-", _MINUS),
    (b"eE+", _EXP),
):
    _CLASS[np.frombuffer(_chars, dtype=np.uint8)] = _code
_POW10_INT = 10 ** np.arange(19, dtype=np.int64)  # 1 .. 1e18, exact
_POW10_FLOAT = np.array([float(10**k) for k in range(23)])  # 1 .. 1e22, exact in float64
_TWO53 = 2**53


def _parse_rows(body: bytes, row_len: int, chunk_bytes: int = 64_000) -> np.ndarray | None:
    """Parse the body of a LEAF ``"x"`` array chunk by chunk (about 80 FEMNIST rows each, which keeps
    the temporaries in cache: faster than one pass over the whole body). None when malformed."""
    parts = []
    pos, n = 0, len(body)
    while pos < n:
        end = body.find(b"]", pos + chunk_bytes) if pos + chunk_bytes < n else -1
        if end < 0:
            end = n - 1
        piece = _parse_chunk(body[pos : end + 1], row_len)
        if piece is None:
            return None
        parts.append(piece)
        if end == n - 1:
            break
        nxt = body.find(b"[", end)
        if nxt < 0 or body[end + 1 : nxt].strip() != b",":
            return None
        pos = nxt
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk_rows(cls: np.ndarray, row_len: int) -> tuple | None:
    """The commas' positions, the running comma count, and the number of rows and of tokens of a chunk whose
    characters have classes ``cls``; None unless it is rows of ``row_len`` comma-separated tokens."""
    # Row structure: rows of row_len comma-separated tokens, separated by single commas.
    is_comma = cls == _COMMA
    comma_pos = np.flatnonzero(is_comma)
    ccum = np.cumsum(is_comma, dtype=np.int32)
    opens = np.flatnonzero(cls == _OPEN)
    closes = np.flatnonzero(cls == _CLOSE)
    rows = opens.size
    ntok = comma_pos.size + 1
    if rows == 0 or closes.size != rows or ntok != rows * row_len:
        return None
    if not ((opens < closes).all() and (closes[:-1] < opens[1:]).all()):
        return None
    if not ((ccum[closes] - ccum[opens] == row_len - 1).all() and (ccum[opens[1:]] - ccum[closes[:-1]] == 1).all()):
        return None
    return comma_pos, ccum, rows, ntok


def _chunk_values(a: np.ndarray, cls: np.ndarray, comma_pos, ccum, ntok: int) -> tuple | None:
    """Each token's value as float64 (its digits / 10**fraction digits, signed) and which tokens ``float`` must read
    instead (exponents, over 18 significant digits, over 22 fraction digits, ambiguous float32 roundings); None for a
    token that is not one number."""
    # Tokens (brackets count as spaces): exactly one run of number characters each.
    nonspace = cls > _COMMA
    runs = int(nonspace[0]) + np.count_nonzero(nonspace[1:] & ~nonspace[:-1])
    is_digit = cls == _DIGIT
    dcum = np.cumsum(is_digit, dtype=np.int32)
    d_end = np.append(dcum[comma_pos], dcum[-1]).astype(np.int64)  # digits up to each token's end
    d_start = np.concatenate(([0], d_end[:-1]))
    ndig = d_end - d_start
    if runs != ntok or (ndig == 0).any():
        return None
    slow = np.zeros(ntok, dtype=bool)
    exp_pos = np.flatnonzero(cls == _EXP)
    slow[ccum[exp_pos]] = True  # exponent forms: left to float()
    minus_pos = np.flatnonzero(cls == _MINUS)
    neg = np.zeros(ntok, dtype=bool)
    neg[ccum[minus_pos]] = True
    if minus_pos.size and not (slow[ccum[minus_pos]] | (minus_pos > 0) & (cls[minus_pos - 1] <= _COMMA)).all():
        return None  # a '-' inside a number
    dot_pos = np.flatnonzero(cls == _DOT)
    dot_tok = ccum[dot_pos]
    if dot_pos.size and np.bincount(dot_tok, minlength=ntok).max() > 1:
        return None
    frac = np.zeros(ntok, dtype=np.int64)
    frac[dot_tok] = d_end[dot_tok] - dcum[dot_pos]
    # Mantissa as an integer: digit * 10**(digits after it in its token), summed per token.
    dv = a[np.flatnonzero(is_digit)] - np.uint8(48)
    weight = np.repeat(d_end - 1, ndig) - np.arange(dv.size, dtype=np.int64)
    long_digit = np.flatnonzero((weight > 18) & (dv > 0))
    if long_digit.size:  # more than 18 significant digits
        slow[np.searchsorted(d_end, long_digit, side="right")] = True
    mant = np.add.reduceat(dv.astype(np.int64) * _POW10_INT[np.minimum(weight, 18)], d_start)
    slow |= frac > 22
    value = mant.astype(np.float64) / _POW10_FLOAT[np.minimum(frac, 22)]
    value[neg] = -value[neg]
    inexact = np.flatnonzero(mant > _TWO53)
    if inexact.size:  # value is within ~1.5 ulp: keep it where all nearby doubles round alike
        v = value[inexact]
        ambiguous = (v * (1 - 2.0**-50)).astype(np.float32) != (v * (1 + 2.0**-50)).astype(np.float32)
        slow[inexact[ambiguous]] = True
    return value, slow


def _parse_chunk(body: bytes, row_len: int) -> np.ndarray | None:
    """Parse the body of a LEAF ``"x"`` array, ``[f, f, ...], [f, ...]``, into float32 [rows, row_len].

    Returns None when it is not a list of rows of ``row_len`` numbers. Each value equals
    ``np.float32(float(token))`` (what ``json`` + ``np.asarray(..., float32)`` give) at a fraction of
    the cost of ``json`` or ``np.fromstring``: a token ``[-]digits[.digits]`` with digit string D below
    2**53 is exactly ``D / 10**f`` (one correctly rounded division, Clinger's fast path); longer
    mantissas are kept where the float32 rounding is unambiguous, and the rare rest (exponent forms,
    ambiguous roundings) go through ``float``. Number syntax is slightly more lenient than JSON's
    (leading zeros, ``.5``, ``5.`` and ``+1`` are read as numbers).
    """
    a = np.frombuffer(body, dtype=np.uint8)
    n = a.size
    cls = _CLASS[a]
    if n == 0 or cls.max() == _INVALID:
        return None
    layout = _chunk_rows(cls, row_len)
    if layout is None:
        return None
    comma_pos, ccum, rows, ntok = layout
    parsed = _chunk_values(a, cls, comma_pos, ccum, ntok)
    if parsed is None:
        return None
    value, slow = parsed
    with np.errstate(over="ignore"):  # beyond float32 range becomes +-inf, as np.float32(float(token)) does
        out = value.astype(np.float32)
        slow_tok = np.flatnonzero(slow)
        if slow_tok.size:
            bounds = np.concatenate(([-1], comma_pos, [n]))
            for t in slow_tok.tolist():
                try:
                    out[t] = float(body[bounds[t] + 1 : bounds[t + 1]].strip(b" \t\r\n[]"))
                except ValueError:
                    return None
    return out.reshape(rows, row_len)


def _cut_x_bodies(path: Path, text: bytes, token: str) -> tuple[bytes, list[bytes]]:
    """The file with every ``"x"`` array replaced by the string ``<token><i>``, and the arrays' bodies by ``i``."""
    pieces: list[bytes] = []
    bodies: list[bytes] = []
    pos = 0
    for m in _X_OPEN.finditer(text):
        if m.start() < pos:  # inside a body already cut out (cannot happen for numeric bodies)
            continue
        start = m.end()  # just after the outer '['
        empty = _X_EMPTY.match(text, start)
        if empty:
            body, end = b"", empty.end()
        else:
            close = _X_CLOSE.search(text, start)
            if close is None:
                raise DataError(f'{path}: unterminated "x" array; expected {LEAF_FORMAT}')
            body, end = text[start : close.start() + 1], close.end()
        pieces += [text[pos : m.start()], b'"x": "%s%d"' % (token.encode(), len(bodies))]
        bodies.append(body)
        pos = end
    pieces.append(text[pos:])
    return b"".join(pieces), bodies


def _leaf_doc(path: Path, rest: bytes) -> tuple[list, dict, list | None]:
    """The parsed rest of a LEAF file: its ``users``, ``user_data`` and optional ``num_samples``, each checked."""
    try:
        doc = json.loads(rest)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{path}: malformed JSON ({e}); expected {LEAF_FORMAT}") from None
    if not isinstance(doc, dict):
        raise DataError(f"{path}: top level is not a JSON object; expected {LEAF_FORMAT}")
    for key in ("users", "user_data"):
        if key not in doc:
            raise DataError(f"{path}: missing key '{key}'; expected {LEAF_FORMAT}")
    users, user_data = doc["users"], doc["user_data"]
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise DataError(f"{path}: 'users' is not a list of strings; expected {LEAF_FORMAT}")
    if not isinstance(user_data, dict):
        raise DataError(f"{path}: 'user_data' is not an object; expected {LEAF_FORMAT}")
    num_samples = doc.get("num_samples")
    if num_samples is not None and (not isinstance(num_samples, list) or len(num_samples) != len(users)):
        raise DataError(f"{path}: 'num_samples' does not have one entry per user; expected {LEAF_FORMAT}")
    return users, user_data, num_samples


def _leaf_rows(path: Path, user: str, entry, token: str, bodies: list[bytes], row_len: int) -> tuple[np.ndarray, list]:
    """One user's rows x float32 [n, row_len] (parsed from its cut-out body) and its labels y (a list of integers)."""
    if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
        raise DataError(f"{path}: user '{user}' has no 'x'/'y' entry in 'user_data'; expected {LEAF_FORMAT}")
    ref, y = entry["x"], entry["y"]
    if not isinstance(ref, str) or not ref.startswith(token):
        raise DataError(f"{path}: 'x' of user '{user}' is not a list of rows; expected {LEAF_FORMAT}")
    body = bodies[int(ref[len(token) :])]
    if body == b"":
        x = np.zeros((0, row_len), dtype=np.float32)
    else:
        x = _parse_rows(body, row_len)
        if x is None:
            raise DataError(
                f"{path}: 'x' of user '{user}' is not a list of rows of {row_len} numbers; expected {LEAF_FORMAT}"
            )
    if not isinstance(y, list) or not all(type(v) is int or (type(v) is float and v.is_integer()) for v in y):
        raise DataError(f"{path}: 'y' of user '{user}' is not a list of integers; expected {LEAF_FORMAT}")
    return x, y


@kept
def read_leaf_json(path: Path, row_len: int = 784) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Read one LEAF JSON file (plain or gzip) into ``[(user, x float32 [n, row_len], y int64 [n])]``.

    Users come in the order of the file's ``"users"`` list. The large ``"x"`` arrays are cut out of
    the text and parsed with numpy (``json`` on 80 MB of floats takes seconds); the rest is parsed
    with ``json``, so the structure is still fully validated.
    """
    text = read_bytes(path, LEAF_FORMAT)
    token = "leaf-x-" + os.urandom(8).hex() + "-"  # random placeholder prefix: no real file contains it
    rest, bodies = _cut_x_bodies(path, text, token)
    users, user_data, num_samples = _leaf_doc(path, rest)
    out = []
    for i, user in enumerate(users):
        x, y = _leaf_rows(path, user, user_data.get(user), token, bodies, row_len)
        if len(y) != len(x):
            raise DataError(
                f"{path}: user '{user}' has {len(x)} rows in 'x' but {len(y)} labels; expected {LEAF_FORMAT}"
            )
        if num_samples is not None and num_samples[i] != len(y):
            raise DataError(
                f"{path}: user '{user}' lists num_samples {num_samples[i]} but has {len(y)} samples; "
                f"expected {LEAF_FORMAT}"
            )
        out.append((user, x, np.asarray(y, dtype=np.int64).reshape(-1)))
    return out


# ---------------------------------------------------------------------------------- tensor files

TENSOR_FILE_FORMAT = (
    "a .npz (numpy.savez) or .pt (torch.save of a dict) file with arrays x [N, ...] and y [N] "
    "(integer labels 0..C-1), optionally writers [N], x_test, y_test, writers_test"
)


def read_tensor_file(path: Path) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` (``numpy.load``, no pickles) or ``.pt`` file (``torch.load(weights_only=True)`` of a
    dict of tensors, arrays, lists or numbers) as numpy arrays, by key."""
    if not path.is_file():
        why = "is a folder" if path.is_dir() else "not found"
        raise DataError(f"{path}: {why}; expected {TENSOR_FILE_FORMAT}")
    if path.suffix == ".npz":
        with open(path, "rb") as fh:
            if fh.read(4) != b"PK\x03\x04":
                raise DataError(f"{path}: not a zip archive, so not a .npz; expected {TENSOR_FILE_FORMAT}")
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: np.asarray(z[k]) for k in z.files}
        except (OSError, ValueError, EOFError) as e:
            raise DataError(
                f"{path}: not a readable .npz ({type(e).__name__}: {e}); expected {TENSOR_FILE_FORMAT}"
            ) from None
        except Exception as e:  # zipfile.BadZipFile and friends
            raise DataError(
                f"{path}: not a readable .npz ({type(e).__name__}: {e}); expected {TENSOR_FILE_FORMAT}"
            ) from None
    if path.suffix == ".pt":
        import torch

        try:
            obj = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # a foreign or truncated file, or objects weights_only refuses
            raise DataError(
                f"{path}: not a readable .pt file ({type(e).__name__}: "
                f"{str(e).split('. ')[0].splitlines()[0] if str(e) else ''}); "
                f"expected {TENSOR_FILE_FORMAT}"
            ) from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}: holds a {type(obj).__name__}, not a dict; expected {TENSOR_FILE_FORMAT}")
        out = {}
        for k, v in obj.items():
            try:
                out[str(k)] = v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            except Exception as e:  # ragged lists, odd objects
                raise DataError(
                    f"{path}: key '{k}' is not an array ({type(e).__name__}: {e}); expected {TENSOR_FILE_FORMAT}"
                ) from None
        return out
    raise DataError(f"{path}: unknown file type '{path.suffix}'; expected {TENSOR_FILE_FORMAT}")
