"""How much of a VAE's generated data is the minor class, on two-class data trained at an imbalance (Chen (2019),
thesis, sec. 4 and Table 4.4: a DPP prior on the latent codes keeps the minor class in what the model generates,
where the VAE's share falls below the training share).

``generated_minor_share``: the fraction of ``n`` images decoded from z ~ N(0, I) (the decoder's Bernoulli means) that
a classifier of the two classes assigns to the minor one. The classifier is a logistic regression on pixels
(scikit-learn, C = 0.1), fitted on one half of the balanced test set (500 + 500 images by default) and scored on the
other half (``minor_classifier_accuracy``): the test images are only labelled here, never scored by the VAE's
bounds, so the VAE's own test metrics are unaffected. Only data drawn with ``data.imbalance`` have it: their
``minor_class`` (images.ImageData), the second of ``data.classes``.
"""

from __future__ import annotations

import numpy as np
import torch

GENERATED = 10_000  # images decoded per run, as Chen (2019) Table 4.4 counts


def minor_share(model, minor: int, n: int = GENERATED, seed: int = 0) -> dict[str, float]:
    """``generated_minor_share`` and ``minor_classifier_accuracy`` of a trained VAE (module docstring)."""
    from sklearn.linear_model import LogisticRegression

    data = model.data
    x = data.x_test.reshape(len(data.x_test), -1)
    y = data.y_test
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    fit, held = order[: len(y) // 2], order[len(y) // 2:]
    classifier = LogisticRegression(max_iter=2000, C=0.1).fit(x[fit], y[fit])
    accuracy = float(classifier.score(x[held], y[held]))
    gen = torch.Generator(device=model.device).manual_seed(seed)
    model.eval()
    with torch.no_grad():
        z = torch.randn(n, model.latent_dim, generator=gen, device=model.device, dtype=model.dtype)
        images = torch.sigmoid(model.decoder(z)).reshape(n, -1).cpu().numpy()
    model.train()
    return {"generated_minor_share": float(np.mean(classifier.predict(images) == minor)),
            "minor_classifier_accuracy": accuracy}
