"""Vendor the posteriordb suite's data and gold-standard reference draws into bayesx/targets/posteriordb/data/.

posteriordb (github.com/stan-dev/posteriordb, BSD-3) stores each data set as ``data/data/<name>.json.zip``
and each reference posterior as ``reference_posteriors/draws/draws/<posterior>.json.zip`` (10 chains of
1,000 draws from long Stan runs, one dict per chain). This script reads them from a git checkout of
posteriordb and writes one compressed ``<file>.npz`` per posterior: the data's arrays as ``data.<key>``,
the reference draws as ``reference`` (float32, or float64 where the entry asks, (draws, parameters), chains one after the other, thinned
to ``--max-draws`` evenly within each chain) and their names as ``param_names``.

    python experiments/vendor_posteriordb.py /path/to/posteriordb-checkout [--commit HEAD] [--only NAME ...]

``--only`` rewrites the files of the named posteriors alone (a rewritten file differs in its zip timestamps even
where its arrays do not).
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np

from bayesx.targets.posteriordb.suite import SUITE

OUT = Path(__file__).resolve().parents[1] / "bayesx" / "targets" / "posteriordb" / "data"


def read_zipped_json(repo: Path, commit: str, path: str):
    raw = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], check=True, capture_output=True).stdout
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        return json.loads(archive.read(archive.namelist()[0]))


def reference_draws(chains: list[dict], max_draws: int, float64: bool) -> tuple[np.ndarray, list[str]]:
    names = list(chains[0])
    per_chain = len(chains[0][names[0]])
    keep = max(1, max_draws // len(chains))
    index = np.linspace(0, per_chain - 1, min(keep, per_chain)).round().astype(int)
    draws = np.concatenate([np.array([chain[n] for n in names], dtype=np.float64).T[index] for chain in chains])
    return draws.astype(np.float64 if float64 else np.float32), names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("repo", type=Path, help="a git checkout (or bare mirror) of stan-dev/posteriordb")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--max-draws", type=int, default=10_000)
    parser.add_argument("--only", nargs="+", choices=list(SUITE), help="the suite's posteriors to vendor (default: all)")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    done = set()
    for entry in (SUITE[name] for name in args.only or SUITE):
        if entry.file in done:
            continue
        done.add(entry.file)
        root = "posterior_database"
        posterior = json.loads(subprocess.run(["git", "-C", str(args.repo), "show",
                                               f"{args.commit}:{root}/posteriors/{entry.posterior}.json"],
                                              check=True, capture_output=True).stdout)
        data = read_zipped_json(args.repo, args.commit, f"{root}/data/data/{posterior['data_name']}.json.zip")
        chains = read_zipped_json(args.repo, args.commit,
                                  f"{root}/reference_posteriors/draws/draws/{posterior['reference_posterior_name']}.json.zip")
        draws, names = reference_draws(chains, min(args.max_draws, entry.max_draws), entry.float64)
        arrays = {f"data.{k}": np.asarray(v, dtype=np.float64) for k, v in data.items()}
        np.savez_compressed(OUT / f"{entry.file}.npz", reference=draws, param_names=np.array(names), **arrays)
        print(f"{entry.file}.npz: {draws.shape[0]} draws of {len(names)} parameters, data {sorted(data)}")


if __name__ == "__main__":
    main()
