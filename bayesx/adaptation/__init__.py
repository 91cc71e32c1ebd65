"""Warm-up adaptation of MCMC kernels: step size and metric, composed around a kernel."""
