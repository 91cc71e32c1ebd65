"""DPP-VAE vs VAE on imbalanced two-class data: Table 4.4 and Figure 4.2 of the thesis (Chen (2019) ch. 4).

For each imbalance ratio (major:minor) both models are trained on the same imbalanced training set;
then
  generated share   the fraction of 10,000 images decoded from z ~ N(0, I) that a classifier
                    (logistic regression on pixels, trained by this script on balanced data from
                    the same two classes, its test accuracy reported) assigns to the minor class
  balanced accuracy after every epoch, a logistic regression on the training latent means
                    (labels of the imbalanced set) scored on a balanced test set, against
                    cumulative training time (Figure 4.2)

    python experiments/dpp_vae_table44.py --data fashion_mnist          # full protocol: 5000 images
    python experiments/dpp_vae_table44.py --data mnist --n-train 1000 --ratios 10,100   # scaled down

The thesis uses MNIST '0' (major) vs '1' (minor), 5000 training images, a balanced test set of
500 + 500, z = 20, 10 epochs, batch 100 and a two-layer conv encoder/decoder; here --arch fc
(default, the FC preset) or conv (the 3-layer conv preset). The 10,000-digit MNIST subset has
about 1,000 images per digit, so its version is scaled down.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402

from bayesx.data.images import load_images  # noqa: E402
from bayesx.methods.vae.dppvae import DPPVAE  # noqa: E402
from bayesx.methods.vae.trainer import VAE  # noqa: E402
from bayesx.vae.model import VAEModel  # noqa: E402

PUBLISHED = {10: (9.1, 7.2, 17.7), 100: (0.99, 1.21, 3.68), 1000: (0.0999, 0.0562, 0.9469)}  # % train, VAE, DPP-VAE


def pixel_classifier(data_name: str, classes: list[int], seed: int) -> tuple[LogisticRegression, float, int]:
    """Logistic regression on pixels, trained on balanced images of the two classes."""
    balanced = load_images(data_name, classes=classes, imbalance=1, binarize="fixed", seed=seed + 1)
    x = balanced.x_train.reshape(len(balanced.x_train), -1)
    clf = LogisticRegression(max_iter=2000, C=0.1).fit(x, balanced.y_train)
    accuracy = clf.score(balanced.x_test.reshape(len(balanced.x_test), -1), balanced.y_test)
    return clf, float(accuracy), len(x)


def latent_accuracy(model: VAEModel, data) -> float:
    """Balanced-test accuracy of a logistic regression on the latent means."""
    model.eval()
    with torch.no_grad():
        x_train, _ = model.tensors("train")
        x_test, _ = model.tensors("test")
        m_train = model.encode(x_train)[0].cpu().numpy()
        m_test = model.encode(x_test)[0].cpu().numpy()
    model.train()
    if len(np.unique(data.y_train)) < 2:
        return float("nan")
    clf = LogisticRegression(max_iter=2000).fit(m_train, data.y_train)
    return float(clf.score(m_test, data.y_test))


def generated_minor_share(model: VAEModel, clf, minor: int, n: int, seed: int) -> float:
    gen = torch.Generator(device=model.device).manual_seed(seed)
    model.eval()
    with torch.no_grad():
        z = torch.randn(n, model.latent_dim, generator=gen, device=model.device, dtype=model.dtype)
        images = torch.sigmoid(model.decoder(z)).cpu().numpy().reshape(n, -1)
    return float(np.mean(clf.predict(images) == minor))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default="fashion_mnist")
    parser.add_argument("--classes", default="0,1", help="major,minor")
    parser.add_argument("--ratios", default="10,100,1000")
    parser.add_argument("--n-train", type=int, default=5000)
    parser.add_argument("--n-test", type=int, default=500, help="per class")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--arch", default="fc")
    parser.add_argument("--samples", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    parser.add_argument("--seeds", default="0,1,2", help="training seeds; shares and accuracies are averaged")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    classes = [int(c) for c in args.classes.split(",")]
    out = Path(args.out or f"results/dpp_vae_table44_{args.data}.md")
    start = time.perf_counter()
    clf, clf_acc, clf_n = pixel_classifier(args.data, classes, 0)
    rows, curves = [], {}
    seeds = [int(v) for v in args.seeds.split(",")]
    for ratio in [int(r) for r in args.ratios.split(",")]:
        row = {"ratio": ratio, "seeds": seeds}
        for seed in seeds:
            data = load_images(args.data, classes=classes, imbalance=ratio, n_train=args.n_train, n_test=args.n_test,
                               seed=seed)
            row["n_train"], row["train_share"] = len(data.y_train), float(np.mean(data.y_train == classes[1]))
            for name, cls in (("VAE", VAE), ("DPP-VAE", DPPVAE)):
                torch.manual_seed(seed)
                model = VAEModel(data, arch=args.arch, latent_dim=20)
                curve = []
                method = cls(epochs=args.epochs, batch_size=args.batch, eval={"k": 1, "n_test": 1})
                method.fit(model, torch.Generator().manual_seed(seed), progress=False,
                           epoch_callback=lambda epoch, seconds, m=model, c=curve, d=data:
                           c.append((seconds, latent_accuracy(m, d))))
                row.setdefault(f"{name}_share", []).append(generated_minor_share(model, clf, classes[1], args.samples,
                                                                                 seed))
                row.setdefault(f"{name}_accuracy", []).append(curve[-1][1] if curve else float("nan"))
                curves.setdefault((ratio, name), []).append(curve)
                print(f"ratio {ratio} seed {seed} {name}: minor share {row[f'{name}_share'][-1]:.4f}, "
                      f"latent accuracy {row[f'{name}_accuracy'][-1]:.3f}", flush=True)
        rows.append(row)
    seconds = time.perf_counter() - start

    figure = out.with_suffix(".png")
    fig, axes = plt.subplots(1, len(rows), figsize=(4.5 * len(rows), 3.6), squeeze=False)
    for ax, row in zip(axes[0], rows):
        for name, style in (("VAE", "o-"), ("DPP-VAE", "s-")):
            runs = curves[(row["ratio"], name)]
            t = np.mean([[p[0] for p in c] for c in runs], 0)
            acc = np.mean([[p[1] for p in c] for c in runs], 0)
            ax.plot(t, acc, style, label=f"{name} (mean of {len(runs)} seeds)", ms=3)
        ax.set(title=f"{row['ratio']}:1", xlabel="training time (s)", ylabel="balanced test accuracy")
        ax.legend()
    fig.tight_layout()
    fig.savefig(figure, dpi=110)
    plt.close(fig)

    lines = ["# DPP-VAE vs VAE on imbalanced two-class data (Chen (2019) Table 4.4, Figure 4.2)", "",
             f"Command: `python experiments/dpp_vae_table44.py {' '.join(sys.argv[1:])}`".rstrip(), "",
             f"Machine: {platform.machine()}, torch {torch.__version__}, {args.threads} threads. Total "
             f"{seconds / 60:.1f} min. Data: {args.data}, classes {classes[0]} (major) vs {classes[1]} (minor), "
             f"balanced test {args.n_test} + {args.n_test}; seeds {args.seeds} (mean ± sd over seeds); arch {args.arch}, z = 20, {args.epochs} epochs, batch "
             f"{args.batch}. Minor-class classifier: logistic regression on pixels trained on {clf_n} balanced "
             f"images, test accuracy {clf_acc:.3f}. Published: MNIST 0 vs 1, 5000 images (Chen (2019) Table 4.4).", "",
             f"| ratio | training images | minor share in training (published) | VAE generated of {args.samples} (published) | "
             "DPP-VAE generated (published) | latent-mean accuracy VAE / DPP-VAE |", "|---|---|---|---|---|---|"]
    for r in rows:
        pub = PUBLISHED.get(r["ratio"], (None, None, None))
        def pct(values, i):
            values = np.atleast_1d(values)
            spread = f" ± {100 * np.std(values):.2g}" if len(values) > 1 else ""
            return f"{100 * np.mean(values):.3g}%{spread}" + (f" ({pub[i]}%)" if pub[i] is not None else "")

        lines.append(f"| {r['ratio']}:1 | {r['n_train']} | {pct(r['train_share'], 0)} | {pct(r['VAE_share'], 1)} | "
                     f"{pct(r['DPP-VAE_share'], 2)} | {np.mean(r['VAE_accuracy']):.3f} / "
                     f"{np.mean(r['DPP-VAE_accuracy']):.3f} |")
    lines += ["", f"Figure: `{figure.name}` (balanced test accuracy of the latent means against training time)."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"rows": rows, "classifier_accuracy": clf_acc}, indent=1,
                                                   default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
