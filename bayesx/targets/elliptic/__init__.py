"""The elliptic-PDE inverse problem (Deep MCMC sec. 4.2): P2 finite elements, prior, forward and adjoint."""

from bayesx.targets.elliptic.model import EllipticInverse

__all__ = ["EllipticInverse"]
