"""Pure MCMC transition kernels and integrators: init/step functions over NamedTuple states."""
