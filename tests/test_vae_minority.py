"""bayesx.methods.vae.minority: the share of a VAE's generated images a pixel classifier puts in the minor class."""

from __future__ import annotations

import numpy as np
import torch

from bayesx.methods.vae import minority


class _Data:
    """Two classes of 4x4 images: class 0 lit on the left half, class 1 on the right (with noise), 200 + 200."""

    def __init__(self):
        rng = np.random.default_rng(0)
        y = np.repeat([0, 1], 200)
        x = rng.random((400, 1, 4, 4)) < 0.15
        x[y == 0, :, :, :2] |= rng.random((200, 1, 4, 2)) < 0.8
        x[y == 1, :, :, 2:] |= rng.random((200, 1, 4, 2)) < 0.8
        self.x_test, self.y_test = x.astype(np.float32), y


class _Model(torch.nn.Module):
    """A 'VAE' whose decoder draws class ``lit`` images where z's first coordinate is below ``cut``."""

    def __init__(self, data, cut: float):
        super().__init__()
        self.data, self.latent_dim, self.cut = data, 2, cut
        self.device, self.dtype = torch.device("cpu"), torch.float32

    def decoder(self, z):
        left = torch.tensor([1.0, 1.0, -1.0, -1.0]).repeat(4) * 6.0
        right = -left
        return torch.where((z[:, :1] < self.cut), right, left).reshape(-1, 1, 4, 4)


def test_the_share_is_the_fraction_of_draws_decoded_as_the_minor_class():
    data = _Data()
    for cut, share in ((-1.2815516, 0.10), (0.0, 0.5)):  # Phi(cut): the fraction decoded as class 1 (right-lit)
        found = minority.minor_share(_Model(data, cut), minor=1, n=20_000)
        assert found["minor_classifier_accuracy"] > 0.95
        assert abs(found["generated_minor_share"] - share) < 4 * (share * (1 - share) / 20_000) ** 0.5 + 1e-3
    # control: the same draws scored for the other class give the complement
    found = minority.minor_share(_Model(data, -1.2815516), minor=0, n=20_000)
    assert abs(found["generated_minor_share"] - 0.90) < 0.01


def test_only_data_drawn_at_an_imbalance_have_a_minor_class():
    """images.load_images sets ImageData.minor_class with data.imbalance (the second of data.classes), else None:
    the trainer logs the share only then."""
    from bayesx.data.images import load_images

    common = dict(name="mnist", source="auto", binarize="fixed", n_train=None, n_test=20, test_fraction=0.2, seed=0)
    assert load_images(classes=(3, 8), imbalance=10.0, **common).minor_class == 8
    assert load_images(classes=(3, 8), imbalance=None, **common).minor_class is None
