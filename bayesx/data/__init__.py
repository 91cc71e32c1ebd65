"""Data sets for bayesx: loaders returning :class:`ClassificationData`, and the data registry.

Loaders (called by Hydra through ``_target_``, keyword arguments only):

* :func:`bayesx.data.synthetic.load_synthetic` - generated Deep MCMC logistic-regression data;
* :func:`bayesx.data.digits.load_digits` - two classes of scikit-learn's 8x8 digits;
* :func:`bayesx.data.mnist.load_mnist01` - two MNIST classes (vendored 10k digits or full MNIST);
* :func:`bayesx.data.csv.load_csv` - a user's CSV file with a 0/1 label column.

:mod:`bayesx.data.registry` lists the known data sets and downloads the fetchable ones.
"""

from bayesx.data.classification import ClassificationData, seeded_split

__all__ = ["ClassificationData", "seeded_split"]
