"""Reading and writing IDX files, the format of MNIST and Fashion-MNIST.

An IDX file starts with a four-byte magic number: two zero bytes, a type code and the number of
dimensions; then one big-endian int32 per dimension; then the data, big-endian, row-major. Files may
be gzip-compressed (recognised by the bytes 1f 8b, whatever the file name).
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import numpy as np

from bayesx.errors import BayesxError

#: IDX type code -> big-endian NumPy dtype.
TYPE_CODES: dict[int, np.dtype] = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"
_KNOWN_CODES = ", ".join(f"0x{code:02X}" for code in TYPE_CODES)


def _read_bytes(path: Path) -> bytes:
    """Return the (decompressed) content of ``path``."""
    if not path.is_file():
        raise BayesxError(f"IDX file '{path}' not found; check the path, or fetch the data set again")
    raw = path.read_bytes()
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as handle:
            return handle.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise BayesxError(f"IDX file '{path}' is a damaged gzip file ({exc}); re-download the file") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (gzipped or not) and return its array in native byte order."""
    path = Path(path).expanduser()
    content = _read_bytes(path)
    if len(content) < 4 or content[0:2] != b"\x00\x00" or content[2] not in TYPE_CODES:
        got = "0x" + content[:4].hex().upper() if content else "an empty file"
        raise BayesxError(
            f"bad magic number in '{path}': expected 0x0000 followed by a known type code "
            f"({_KNOWN_CODES}), got {got}; is this an IDX file?"
        )
    dtype, ndim = TYPE_CODES[content[2]], content[3]
    header_size = 4 + 4 * ndim
    if len(content) < header_size:
        raise BayesxError(
            f"IDX file '{path}' is truncated: expected {header_size} header bytes for {ndim} dimensions, "
            f"found {len(content)}; re-download the file"
        )
    shape = tuple(int(d) for d in np.frombuffer(content, dtype=">i4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(content) - header_size
    if found != expected:
        problem = "truncated" if found < expected else "too long"
        raise BayesxError(
            f"IDX file '{path}' is {problem}: expected {expected} bytes of data for shape {shape}, "
            f"found {found}; re-download the file"
        )
    data = np.frombuffer(content, dtype=dtype, offset=header_size).reshape(shape)
    return data.astype(dtype.newbyteorder("="))


def write_idx(path: str | Path, array: np.ndarray) -> Path:
    """Write ``array`` as an IDX file; gzip-compressed when the name ends in ``.gz``."""
    path = Path(path)
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in TYPE_CODES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        raise BayesxError(
            f"IDX cannot store dtype {array.dtype}; convert the array to uint8, int8, int16, int32, float32 or float64"
        )
    code = codes[native]
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">i4").tobytes()
    content = header + np.ascontiguousarray(array, dtype=TYPE_CODES[code]).tobytes()
    if path.suffix == ".gz":
        content = gzip.compress(content, mtime=0)
    path.write_bytes(content)
    return path


def idx_file_names(prefix: str) -> tuple[str, str]:
    """Standard (images, labels) file names without ``.gz`` for a prefix such as ``train``."""
    return f"{prefix}-images-idx3-ubyte", f"{prefix}-labels-idx1-ubyte"


def find_idx_file(directory: Path, stem: str) -> Path | None:
    """Return ``directory/stem.gz`` or ``directory/stem``, whichever exists (gzip first), else None."""
    for name in (stem + ".gz", stem):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    return None


def load_idx_dataset(
    directory: str | Path, prefix_train: str = "train", prefix_test: str = "t10k"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read the four standard IDX files in ``directory``.

    Returns (train_images, train_labels, test_images, test_labels).
    """
    directory = Path(directory).expanduser()
    stems = [*idx_file_names(prefix_train), *idx_file_names(prefix_test)]
    expected = ", ".join(stem + "[.gz]" for stem in stems)
    if not directory.is_dir():
        raise BayesxError(f"data directory '{directory}' not found; create it and put {expected} there")
    paths = {stem: find_idx_file(directory, stem) for stem in stems}
    missing = [stem + "[.gz]" for stem, found in paths.items() if found is None]
    if missing:
        raise BayesxError(
            f"IDX files missing in '{directory}': {', '.join(missing)}; "
            "put those files there or fetch the data set again"
        )
    arrays = [read_idx(paths[stem]) for stem in stems]
    for images, labels, prefix in ((arrays[0], arrays[1], prefix_train), (arrays[2], arrays[3], prefix_test)):
        if labels.ndim != 1 or images.shape[0] != labels.shape[0]:
            raise BayesxError(
                f"IDX files '{prefix}-*' in '{directory}' disagree: {images.shape[0]} images but "
                f"labels of shape {labels.shape}; re-download the files"
            )
    return arrays[0], arrays[1], arrays[2], arrays[3]
