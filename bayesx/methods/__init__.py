"""Inference methods, one module each, grouped by family (see bayesx.methods.base)."""
