"""bayesx: a command-line experiment runner for scalable Bayesian inference."""

__version__ = "0.1.0"
