"""The approximation family: variational and other fitted approximations q."""
