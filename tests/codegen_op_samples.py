"""Densities made from torch's own operator samples (OpInfo), written as plain C by bayesx.native.codegen, compiled
many to a library, and compared with eager PyTorch: the machinery of tests/test_codegen_ops.py.

A sample (``SampleInput``: input, args, kwargs) of an operator becomes a density of a parameter vector q: every
floating tensor of the sample that requires grad is cut from q (contiguous, or through a non-contiguous view:
transposed, strided, expanded along its first dimension), the operator runs, and the density is
``sum_k sum(w_k * out_k)`` over its outputs with fixed weights w_k (an integer or boolean output is converted
to q's dtype first, so a comparison's value counts too). That function is traced as a user's density is
(``compiled._trace``: value and gradient, core-ATen decompositions, constants folded), written as C
(``codegen.generate``), compiled with the flags a user's density gets (``compiled.GENERATED_FLAGS``), loaded as a
``CompiledDensity``, and evaluated at the sample's own values; eager PyTorch and autograd evaluate the same
function at the same point.

Compiling one library per sample would take most of a second each; instead every sample's C goes into a
translation unit of its own (the entry points renamed by ``#define``), the units compile in parallel, and one
library holds them all, cached under the temporary folder by the digest of its sources and flags.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import hashlib
import os
import subprocess
import sys
import tempfile
import types
import unittest
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor
from torch.utils._pytree import tree_flatten, tree_unflatten

from bayesx.native import codegen, compiled
from bayesx.native.build import LINK_FLAGS, _compiler, load, vector_math
from bayesx.native.entry_points import bind

LAYOUTS = ("contiguous", "transposed", "strided", "expanded")
"""How a sample's parameter tensors are cut from q: as they are, through a transpose (the strides reversed), a
slice with step 2, or an expand of their first row along the first dimension (stride 0)."""


def op_db():
    """torch's operator database. Its module imports ``expecttest`` (torch's test-suite base class, a test-only
    dependency not installed here) for TestCase classes these tests do not use: where it is missing, a module that
    stands in for it with unittest's TestCase is registered first."""
    try:
        import expecttest  # noqa: F401
    except ImportError:
        stand_in = types.ModuleType("expecttest")
        stand_in.TestCase = unittest.TestCase
        stand_in.ACCEPT = False
        sys.modules["expecttest"] = stand_in
    from torch.testing._internal.common_methods_invocations import op_db as database

    return database


def op_infos(name: str) -> list:
    """Every OpInfo of ``name`` (the variants too, e.g. ``div`` with rounding modes)."""
    return [info for info in op_db() if info.name == name]


@dataclass
class Case:
    """One density: an operator's sample as a function of q, the point to evaluate it at, and where it came from."""

    label: str
    function: object  # q (dim,) -> ()
    point: Tensor
    dtype: torch.dtype
    graph: torch.fx.GraphModule | None = None
    operators: set = field(default_factory=set)  # the ATen operators the graph runs on parameter-dependent values
    source: str = ""
    data: object = None  # the run-time data blob the C reads (codegen.Generated.data)
    skipped: str = ""  # why the case has no C (codegen.Unsupported), or ""
    crashed: str = ""  # an exception other than Unsupported from tracing or writing (a bug), or ""


def _cut(t: Tensor, layout: str) -> tuple[Tensor, object]:
    """(the numbers q holds for ``t``, a function of that slice of q giving a tensor equal to t in ``layout``)."""
    shape = tuple(t.shape)
    if layout == "transposed" and t.dim() < 2:
        layout = "strided"
    if layout == "expanded" and (t.dim() == 0 or shape[0] < 2):
        layout = "strided"
    if layout == "contiguous":
        return t.reshape(-1), lambda s: s.reshape(shape)
    if layout == "transposed":
        order = tuple(reversed(range(t.dim())))
        return t.permute(order).reshape(-1), lambda s: s.reshape(tuple(reversed(shape))).permute(order)
    if layout == "strided":  # the numbers at even positions, odd positions unused (their gradient is 0)
        filler = torch.full_like(t.reshape(-1), 0.25)
        return torch.stack([t.reshape(-1), filler], -1).reshape(-1), lambda s: s[::2].reshape(shape)
    first = t[:1]  # expanded: one row, read n times through stride 0
    return first.reshape(-1), lambda s: s.reshape(first.shape).expand(shape)


def _weights(out: Tensor, dtype: torch.dtype, seed: int) -> Tensor:
    """Fixed weights in [-1.5, -0.5] u [0.5, 1.5] (none near 0: every element's value and gradient counts)."""
    gen = torch.Generator().manual_seed(seed)
    magnitude = 0.5 + torch.rand(out.shape, generator=gen, dtype=torch.float64)
    sign = torch.where(torch.rand(out.shape, generator=gen) < 0.5, -1.0, 1.0).to(torch.float64)
    return (magnitude * sign).to(dtype)


def sample_case(call, sample, layout: str, dtype: torch.dtype, label: str) -> Case | None:
    """The density of one sample (module docstring), or None where the sample has no floating tensor of ``dtype``
    requiring grad (any, for an operator without autograd) or gives a complex output."""
    leaves, spec = tree_flatten((sample.input, sample.args, sample.kwargs))
    pieces, stored, offset = [], [], 0
    differentiable = any(isinstance(leaf, Tensor) and leaf.requires_grad for leaf in leaves)
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):  # an operator without autograd (a comparison): its floating tensors
            wanted = (leaf.requires_grad or not differentiable) and leaf.dtype == dtype and leaf.numel() > 0
            leaf = leaves[i] = leaf.detach()
            if wanted:
                numbers, build = _cut(leaf, layout)
                pieces.append((i, offset, numbers.numel(), build))
                stored.append(numbers)
                offset += numbers.numel()
    if not pieces:
        return None
    point = torch.cat(stored).to(dtype)

    def rebuild(q: Tensor):
        values = list(leaves)
        for i, start, n, build in pieces:
            values[i] = build(q[start:start + n])
        return tree_unflatten(values, spec)

    try:
        with torch.no_grad():
            inputs, args, kwargs = rebuild(point)
            outputs = [t for t in tree_flatten(call(inputs, *args, **kwargs))[0] if isinstance(t, Tensor)]
    except Exception:  # noqa: BLE001 - a sample the operator refuses in this layout (e.g. an in-place expand)
        return None
    if not outputs or any(t.is_complex() for t in outputs):
        return None
    weights = [_weights(t, dtype, seed=k + 1) for k, t in enumerate(outputs)]

    def density(q: Tensor) -> Tensor:
        inputs, args, kwargs = rebuild(q)
        result = [t for t in tree_flatten(call(inputs, *args, **kwargs))[0] if isinstance(t, Tensor)]
        return sum((w * t.to(q.dtype)).sum() for w, t in zip(weights, result))

    return Case(label, density, point, dtype)


def dynamic_operators(graph: torch.fx.GraphModule) -> set:
    """The ATen operators of ``graph`` that run on values computed from the parameters (codegen writes C for
    these; one on constants alone is evaluated when the graph is interpreted)."""
    dynamic, found = set(), set()
    for node in graph.graph.nodes:
        if node.op == "placeholder" or (node.op == "call_function" and any(n in dynamic for n in node.all_input_nodes)):
            dynamic.add(node)
            if node.op == "call_function":
                found.add(node.target)
    return found


def trace(case: Case) -> Case:
    """Trace and write the case's C as compiled_density does; records the operators, or why there is no C."""
    try:
        case.graph = compiled._trace(case.function, case.point.numel(), case.dtype)
        case.operators = dynamic_operators(case.graph)
        generated, _ = compiled.plain_c(case.graph, case.point.numel(), case.dtype, _compiler())
        case.source, case.data = generated.source, generated.data
    except (codegen.Unsupported, compiled.NotCompiled) as exc:
        case.skipped = str(exc)
    except Exception as exc:  # noqa: BLE001 - the writer itself failed: a bug, reported as such
        case.crashed = f"{type(exc).__name__}: {exc}"
        case.skipped = "the writer raised " + case.crashed
    return case


ENTRY_POINTS = ("bayesx_density", "bayesx_density_work", "bayesx_density_check", "bayesx_density_data_bytes")


def _unit(source: str, k: int) -> str:
    """The source with its entry points renamed to those of case k (one translation unit per case)."""
    return "".join(f"#define {name} {name}_{k}\n" for name in ENTRY_POINTS) + source


def _object(compiler: str, source: Path) -> Path:
    obj = source.with_suffix(".o")
    subprocess.run([compiler, *compiled.GENERATED_FLAGS, "-c", str(source), "-o", str(obj)], check=True,
                   capture_output=True, text=True, timeout=600)
    return obj


def library(cases: list[Case], folder: Path | None = None) -> ctypes.CDLL:
    """One library of every case's C (case k's entry points: bayesx_density_k, ...), from the cache where built."""
    compiler = _compiler()
    digest = hashlib.sha256()
    for part in (compiler, " ".join(compiled.GENERATED_FLAGS), *compiled._environment(cases[0].dtype)):
        digest.update(part.encode())
    for k, case in enumerate(cases):
        digest.update(_unit(case.source, k).encode())
    folder = folder or Path(tempfile.gettempdir()) / f"bayesx-codegen-ops-{os.getuid()}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{digest.hexdigest()[:24]}.so"
    if not path.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            sources = []
            for k, case in enumerate(cases):
                sources.append(Path(tmp) / f"case{k}.c")
                sources[-1].write_text(_unit(case.source, k))
            with concurrent.futures.ThreadPoolExecutor(max(os.cpu_count() or 1, 1)) as pool:
                objects = list(pool.map(lambda s: _object(compiler, s), sources))
            partial = Path(tmp) / "cases.so"
            libraries = ("-lmvec",) if vector_math(compiler) else ()
            subprocess.run([compiler, *LINK_FLAGS, *map(str, objects), "-o", str(partial), *libraries, "-lm"], check=True,
                           capture_output=True, text=True, timeout=600)
            os.replace(partial, path)
    return ctypes.CDLL(str(path))


def densities(cases: list[Case]) -> list[compiled.CompiledDensity]:
    """Each case's compiled density, loaded from one library as compiled_density loads a plain C one."""
    lib = library(cases)
    kernels = load("kernels")
    functions = bind(kernels, compiled.SUFFIX[cases[0].dtype], kernels._name)
    result = []
    for k, case in enumerate(cases):
        function = ctypes.cast(getattr(lib, f"bayesx_density_{k}"), ctypes.c_void_p).value
        work = ctypes.c_size_t.in_dll(lib, f"bayesx_density_work_{k}").value
        data = case.data
        model = compiled._GeneratedModel(function, work, None, data.data_ptr() if data is not None else None)
        result.append(compiled.CompiledDensity(case.point.numel(), case.dtype, Path(lib._name), 0.0, True, functions,
                                               lib, model, compiled.PLAIN_C, data=data))
    return result


TOLERANCE = {torch.float64: 1e-9, torch.float32: 2e-4}
"""Relative to 1 + |value| (and to 1 + the gradient's size, element by element): C's math library and torch's
vectorized one differ in the last bits, and sums run in other orders; a wrong operator is off by far more."""


def disagreement(case: Case, density: compiled.CompiledDensity) -> str:
    """'' where the compiled value and gradient equal eager PyTorch's at the case's point, else what differs."""
    q = case.point.clone()
    lp, grad = density._evaluate(q[None])
    fault = density.fault()
    x = q.clone().requires_grad_(True)
    try:
        expected = case.function(x)
        # an output of comparisons or bitwise operators alone does not depend on q differentiably: gradient 0
        expected_grad = torch.autograd.grad(expected, x, allow_unused=True)[0] if expected.requires_grad else None
    except Exception as exc:  # noqa: BLE001 - PyTorch raises here: the compiled code must fail too
        return "" if fault is not None or bool(torch.isnan(lp).all()) else f"PyTorch raises {exc!r}, C does not"
    if fault is not None:
        return f"C fails where PyTorch does not: {fault}"
    if expected_grad is None:
        expected_grad = torch.zeros_like(q)
    expected = expected.detach()
    tol = TOLERANCE[case.dtype]
    problems = []
    if not _close(lp[0], expected, tol):
        problems.append(f"value {float(lp[0])!r} against {float(expected)!r}")
    finite = expected_grad[torch.isfinite(expected_grad)]  # a NaN or infinite entry must not make the scale NaN
    if not _close(grad[0], expected_grad, tol * (1 + float(finite.abs().max() if finite.numel() else 0))):
        off = int(((grad[0] - expected_grad).abs()).nan_to_num(float("inf")).argmax())
        problems.append(f"gradient[{off}] {float(grad[0, off])!r} against {float(expected_grad[off])!r}")
    return "; ".join(problems)


def _close(actual: Tensor, expected: Tensor, tol: float) -> bool:
    """Equal where both are NaN or the same infinity, else within tol * (1 + |expected|)."""
    actual, expected = actual.to(torch.float64), expected.to(torch.float64)
    same = (actual == expected) | (torch.isnan(actual) & torch.isnan(expected))
    near = (actual - expected).abs() <= tol * (1 + expected.abs())
    return bool((same | near).all())
