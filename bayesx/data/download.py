"""Downloading one file safely and unpacking tar archives.

A download goes to a hidden temporary file beside its destination, its SHA-256 computed as it
arrives; only a complete file whose checksum matches the known one replaces the destination (an
atomic rename), so a truncated or corrupted download leaves the cache as it was.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from bayesx.errors import BayesxError

TIMEOUT_SECONDS = 30
CHUNK_BYTES = 1 << 16
USER_AGENT = "bayesx-data-fetch"


def _reason(exc: BaseException) -> str:
    """A short, one-line reason for a failed download."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code} {exc.reason}"
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc) or type(exc).__name__


class ChecksumMismatch(ValueError):
    """The downloaded bytes are not the file bayesx knows."""


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _copy_response(url: str, handle, progress: bool, label: str) -> str:
    """Stream ``url`` into the open binary file ``handle``, with a tqdm bar when ``progress``; returns
    the SHA-256 of what arrived."""
    from tqdm import tqdm

    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        length = response.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        received = 0
        digest = hashlib.sha256()
        with tqdm(total=total, unit="B", unit_scale=True, desc=label, disable=not progress, leave=False) as bar:
            while chunk := response.read(CHUNK_BYTES):
                handle.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                bar.update(len(chunk))
        if total is not None and received != total:
            raise OSError(f"connection closed after {received} of {total} bytes")
    return digest.hexdigest()


def download_file(name: str, urls: tuple[str, ...], destination: Path, progress: bool = True,
                  sha256: str | None = None) -> tuple[Path, str]:
    """Download the first of ``urls`` that works (and, where ``sha256`` is known, whose bytes have that
    checksum) to ``destination``; return ``destination`` and the SHA-256 of its bytes.

    The data go to a hidden temporary file in the same folder, renamed only when complete and checked.
    """
    destination.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for url in urls:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent)
        try:
            with os.fdopen(descriptor, "wb") as handle:
                digest = _copy_response(url, handle, progress, destination.name)
            if sha256 and digest != sha256:
                raise ChecksumMismatch(f"SHA-256 mismatch (got {digest[:12]}..., expected {sha256[:12]}...): "
                                       f"a truncated or altered file")
            os.replace(temporary, destination)
            return destination, digest
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            failures.append((url, _reason(exc)))
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    first_url, first_reason = failures[0]
    mirrors = f" (and {len(failures) - 1} mirror(s))" if len(failures) > 1 else ""
    raise BayesxError(
        f"could not download {name} from {first_url}{mirrors}: {first_reason}; "
        f"check the network connection, or download it by hand into {destination.parent}"
    )


def extract_tar(name: str, archive: Path, target: Path) -> None:
    """Unpack ``archive`` into ``target``; each top-level entry replaces any older copy."""
    staging = Path(tempfile.mkdtemp(prefix=".extract-", dir=target))
    try:
        with tarfile.open(archive) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(staging, filter="data")
            else:  # Python without extraction filters: refuse unsafe member paths ourselves
                for member in tar.getmembers():
                    if member.name.startswith("/") or ".." in Path(member.name).parts:
                        raise tarfile.TarError(f"unsafe path {member.name!r} in archive")
                tar.extractall(staging)
        for entry in staging.iterdir():
            final = target / entry.name
            if final.is_dir():
                shutil.rmtree(final)
            elif final.exists():
                final.unlink()
            os.replace(entry, final)
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise BayesxError(
            f"could not unpack {archive} for {name} ({exc}); "
            f"delete it and fetch again, or unpack it by hand into {target}"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
