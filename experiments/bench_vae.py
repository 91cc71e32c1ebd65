"""Time per training epoch of VAE and HVI (1, 4, 8 leapfrog steps), and RMHVI, side by side, with
HVI's cost relative to the VAE (FC architecture, MNIST; CPU, and CUDA when available).

    python experiments/bench_vae.py                          # -> results/bench_vae.md
    python experiments/bench_vae.py --n-train 2000 --epochs 2 --devices cpu,cuda

An "epoch" here is one pass over --n-train images in minibatches of 64 (the Zhang (2018) setting); the time
is the median over --epochs epochs after one warm-up epoch.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from bayesx.data.images import load_images
from bayesx.methods.vae import bounds
from bayesx.methods.vae.model import VAEModel

CONTENDERS = [("VAE", "vae", {}), ("HVI 1 step", "hvi", {"leapfrog_steps": 1}),
              ("HVI 4 steps", "hvi", {"leapfrog_steps": 4}), ("HVI 8 steps", "hvi", {"leapfrog_steps": 8}),
              ("RMHVI 1 step", "rmhvi", {"leapfrog_steps": 1})]


def make_bound(kind: str, model, options):
    if kind == "vae":
        return bounds.VAEBound()
    if kind == "hvi":
        return bounds.HVIBound(model, **options)
    return bounds.RMHVIBound(model, **options)


def epoch_seconds(data, device: str, kind: str, options: dict, epochs: int, batch: int = 64) -> float:
    torch.manual_seed(0)
    model = VAEModel(data, arch="fc", device=device)
    bound = make_bound(kind, model, options)
    optim = torch.optim.Adam(list(model.parameters()) + list(bound.parameters()), lr=3e-3)
    x, _ = model.tensors("train")
    times = []
    for epoch in range(epochs + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        xb_all = torch.bernoulli(x)
        for first in range(0, x.shape[0], batch):
            loss = -bound.objective(model, xb_all[first:first + batch]).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if epoch > 0:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--devices", default="cpu" + (",cuda" if torch.cuda.is_available() else ""))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("--out", default="results/bench_vae.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    data = load_images("mnist", n_train=args.n_train, n_test=100)
    devices = [d for d in args.devices.split(",") if d]
    table = {}
    for device in devices:
        for label, kind, options in CONTENDERS:
            table[(device, label)] = epoch_seconds(data, device, kind, options, args.epochs)
            print(f"{device} {label}: {table[(device, label)]:.2f} s/epoch", flush=True)
    lines = ["# VAE vs HVI: seconds per training epoch", "",
             f"Command: `python experiments/bench_vae.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, {args.threads} CPU threads"
             + (f", {torch.cuda.get_device_name(0)}" if "cuda" in args.devices else "") + ". FC architecture "
             f"(784-300-300-20 / 20-400-784), {args.n_train} MNIST images (the vendored subset), batch 64, "
             f"median of {args.epochs} epochs after a warm-up epoch.", "",
             "| device | method | s / epoch | relative to VAE |", "|---|---|---|---|"]
    for device in devices:
        base = table[(device, "VAE")]
        for label, _, _ in CONTENDERS:
            lines.append(f"| {device} | {label} | {table[(device, label)]:.2f} | {table[(device, label)] / base:.1f}x |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
