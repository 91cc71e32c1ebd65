"""Where a float64 density computes in float32: one operation found by running the density once under a torch
function mode that sees every call of PyTorch's Python API (``torch.*``, tensor methods and operators).

``torch.distributions.Gamma(2.0, 2.0).log_prob(x)`` with ``x`` in float64 looks like a float64 density, but the
distribution's parameters are float32 tensors (PyTorch's default dtype, from the Python floats), so the terms that
depend only on them (``xlogy(concentration, rate)``, ``lgamma(concentration)``) are computed in float32 and rounded
to about 7 digits before they meet the float64 value. The compile check cannot see it (the compiled code computes
the same rounded numbers as the function it is checked against). An operation is reported where

- it computes a floating result in float32 that differs from the same operation on its inputs in float64 (it
  rounded: ``log(1.0)`` in float32 is exact and is not reported), or
- its result is float64 but it reads a float32 tensor holding a number that float32 rounded: one whose shortest
  float32 decimal (``0.1``) is another float64 number than the float32 value (0.100000001490116...); ``2.0`` and
  ``0.5`` are exact and are not reported.

A torch function mode, not a dispatch mode: entering a ``TorchDispatchMode`` imports ``torch._dynamo`` (its push is
wrapped in ``torch._disable_dynamo``), 0.7 s on an idle 2-core machine and 1.3-4 s under load, on every run of a
user's density (issue 56's fixed costs); the Python API is where ``torch.distributions`` and a user's code meet the
float32 numbers, so the same operations are found.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

MAX_CHECKED = 4096
"""Numbers of a float32 input checked for rounded decimals (the first ones: a data array is judged by its head)."""


def _rounded_decimals(t: torch.Tensor) -> bool:
    """Whether float32 ``t`` holds a number whose shortest float32 decimal is another float64 number."""
    values = t.detach().reshape(-1)[:MAX_CHECKED].cpu().numpy()
    values = values[np.isfinite(values)]
    return any(float(str(v)) != float(v) for v in values)  # str: the shortest decimal of the float32 value


def _name(func) -> str:
    """``torch.xlogy`` for a function of the torch namespace, ``Tensor.mul`` for a tensor's method or operator."""
    name = getattr(func, "__name__", None) or str(func)
    owner = getattr(func, "__objclass__", None)
    return f"Tensor.{name}" if owner is not None and "Tensor" in owner.__name__ else f"torch.{name}"


class _Float32Finder(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.found: str | None = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.found is None:
            self.found = self._judge(func, args, kwargs, out)
        return out

    def _judge(self, func, args, kwargs, out) -> str | None:
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if any(t.dtype == torch.float32 for t in outputs):
            if not inputs or not any(t.is_floating_point() for t in inputs):
                return None  # a float32 tensor made from Python numbers: judged where it is read
            with torch.no_grad():
                wide = func(*tree_map(lambda t: t.double() if isinstance(t, torch.Tensor)
                                      and t.dtype == torch.float32 else t, args),
                            **tree_map(lambda t: t.double() if isinstance(t, torch.Tensor)
                                       and t.dtype == torch.float32 else t, kwargs))
            wide = [t for t in tree_flatten(wide)[0] if isinstance(t, torch.Tensor)]
            for narrow, exact in zip(outputs, wide):
                if narrow.dtype == torch.float32 and not torch.equal(narrow.double(), exact.double()):
                    return f"{_name(func)} computes in float32"
            return None
        if any(t.dtype == torch.float64 for t in outputs):
            for t in inputs:
                if t.dtype == torch.float32 and _rounded_decimals(t):
                    return f"{_name(func)} reads a float32 tensor whose numbers float32 rounded"
        return None


def float32_operation(function, point: torch.Tensor) -> str | None:
    """The first operation of ``function(point)`` (a float64 point) that computes in float32 or reads rounded
    float32 numbers, described in a phrase; None where there is none."""
    finder = _Float32Finder()
    with torch.no_grad(), finder:
        function(point)
    return finder.found
