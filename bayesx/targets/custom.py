"""A user's own model (``model=custom``): any log density written in torch, gradients by autograd.

    bayesx run model=custom model.log_density=examples/eight_schools.py:log_density model.dim=10 method=nuts
    bayesx run model=custom model.log_density=mypkg.models:poisson model.dim=4 model.data_file=counts.csv

``model.log_density`` names the function as ``package.module:function`` (importable) or
``path/to/file.py:function`` (``:log_density`` when the function part is left out). It takes the
parameters ``theta`` (a tensor of shape (dim,) or, batched, (chains, dim)) and, where ``model.data_file`` is
given, the data as a dict of tensors (a CSV's columns by header, as floating-point numbers of the run's dtype;
a ``.npz``'s arrays, integer and boolean arrays as int64 and bool tensors, the others as floats), and
returns the unnormalised log posterior density: one value per point. A function written for one point
is vectorised with ``torch.func.vmap`` (or, where vmap cannot trace it, called point by point); so is a
function whose value at one row of a batch depends on the other rows.

The posterior is identified (reference cache, ``resume=``, compiled libraries) by what the density computes
at fixed points and by the data file's bytes, not by the bytes of the function's file.

Optional: ``model.init`` (the point the chains start around, jittered by ``model.init_scale``; default
the origin) and ``model.param_names`` (names of the dim coordinates, used in the draws file, the
plots and the tags).

**Named, constrained parameters** (``model.params``): declare each parameter's support and shape instead of
``model.dim``, and the function takes them by name, constrained, with their shapes (batched over chains in front)::

    bayesx run model=custom model.log_density=examples/eight_schools_constrained.py \
        'model.params={mu: real, tau: positive, eta: "real[8]"}'

    def log_density(p, data):          # p.mu (...,), p.tau (...,) > 0, p.eta (..., 8)
        ...

bayesx samples the unconstrained vector, maps it onto the supports and adds the log-Jacobian of the map
(bayesx.targets.parameters: the supports, their maps and why they are written there); the draws, the summary and
``draws.nc`` are on the declared parameters, and ``model.init`` is given by name in constrained values
(``'model.init={mu: 0, tau: 1, eta: [0, 0, 0, 0, 0, 0, 0, 0]}'``). Every method that needs only a log density and its gradient runs on it (MCMC,
VI, flows, SVGD, AIS/SMC, Laplace, Pathfinder); those that need more structure (pCN's Gaussian prior,
the logistic bound of ``method=vi divergence=jj``) say so.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import importlib.util
import math
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
from torch import Tensor

from bayesx.data.download import sha256_of
from bayesx.errors import BayesxError, DensityError
from bayesx.settings import AtLeast, Described, InvalidSetting, Positive, Settings
from bayesx.targets import parameters as constrained
from bayesx.targets.base import Capabilities, TargetBase
from bayesx.targets.precision import float32_operation


UNUSED_PROBES = 4
"""Random points at which a coordinate must leave both the gradient and the log density unchanged to be called
unused (CustomModel._refuse_unused_coordinates)."""
UNUSED_PROBE_SEED = 20261126
PROBE_POINTS = 3
PROBE_SPREADS = (0.1, 1.0, 5.0)
"""Spreads (in init_scale) of the batches on which a batched function must agree with its points taken alone:
near the start, across the starting box, and far (a branch on a batch mean shows at some spread)."""
FINGERPRINT_SCALES = (0.1, 1.0, 10.0)
"""Where a density's identity is read (CustomModel.fingerprint): two points at each scale (in init_scale)."""


@dataclass(frozen=True)
class CustomSettings(Settings):
    log_density: Annotated[str | None, Described("package.module:function or path/to/file.py:function")] = None
    dim: Annotated[int | None, AtLeast(1)] = None
    data_file: str | None = None  # a .csv (columns by header) or .npz file, passed to the function as a dict of tensors
    init: tuple[float, ...] | dict | None = None  # where the chains start (jittered); null: the origin
    init_scale: Annotated[float, Positive()] = 1.0  # chains start uniformly in init +- init_scale
    param_names: tuple[str, ...] | None = None  # one name per coordinate
    params: dict | None = None  # name -> support[shape]: the function takes named, constrained parameters

    def check(self):
        if not self.log_density:
            raise InvalidSetting("log_density", "must be set: model.log_density=package.module:function or "
                                                "path/to/file.py:function")
        if self.params is not None:
            self._check_declared()
            return
        if isinstance(self.init, dict):
            raise InvalidSetting("init", "by name needs model.params (the declared parameters); without it give a "
                                         "list of dim numbers")
        if self.dim is None:
            raise InvalidSetting("dim", "must be set to the number of parameters, e.g. model.dim=10, or declare "
                                        "them by name: 'model.params={mu: real, tau: positive, eta: \"real[8]\"}'")
        for name, value in (("init", self.init), ("param_names", self.param_names)):
            if value is not None and len(value) != self.dim:
                raise InvalidSetting(name, f"has {len(value)} entries but model.dim={self.dim}; give one per parameter")

    def _check_declared(self):
        declared = constrained.parse(self.params)
        dim = constrained.dimension(declared)
        if self.dim is not None and self.dim != dim:
            raise InvalidSetting("dim", f"={self.dim}, but model.params declares {dim} unconstrained numbers; leave "
                                        f"model.dim out (model.params sets it)")
        if self.param_names is not None:
            raise InvalidSetting("param_names", "is not used with model.params (the declared names are the names); "
                                                "leave it out")
        if self.init is not None and not isinstance(self.init, dict):
            raise InvalidSetting("init", "with model.params is given by name in constrained values, e.g. "
                                         "'model.init={tau: 1.0, eta: [0, 0]}'")


def load_function(spec: str, key: str = "model.log_density", default: str = "log_density") -> Callable:
    """The function ``spec`` names: ``package.module:function`` or ``path/to/file.py:function`` (``key``: the option
    the errors name; ``default``: the function's name where the spec gives none)."""
    where, _, name = spec.partition(":")
    name = name or default
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise BayesxError(f"{key}: no file {path}; give an existing .py file (path/to/file.py:function)")
        module_spec = importlib.util.spec_from_file_location(f"bayesx_custom_{path.stem}", path)
        module = importlib.util.module_from_spec(module_spec)
        try:
            module_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's module failed to import: name it, in one line
            raise BayesxError(f"{key}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise BayesxError(f"{key}: cannot import module '{where}' ({exc}); check the name and "
                              f"PYTHONPATH, or give a file as path/to/file.py:function") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise BayesxError(f"{key}: {where} has no function '{name}'; "
                          f"define it or name another one after the colon")
    return function


def load_data(path_text: str, dtype: torch.dtype, device: torch.device) -> dict[str, Tensor]:
    """A .csv file's numeric columns (by header) as tensors of ``dtype``, or a .npz file's arrays: integer and
    boolean arrays keep their kind (int64, bool: group indices index as they are), the others take ``dtype``."""
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise BayesxError(f"model.data_file: no file {path}; give a .csv or .npz file")
    if path.suffix == ".npz":
        return {k: _as_tensor(v, dtype, device) for k, v in _npz_arrays(path).items()}
    if path.suffix != ".csv":
        raise BayesxError(f"model.data_file: {path.name} is neither .csv nor .npz; convert it to one of them")
    with path.open(newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's byte-order mark is not a header
        rows = list(csv.reader(handle))
    if len(rows) < 2:
        raise BayesxError(f"model.data_file: {path} has no data rows below its header")
    header, body = rows[0], rows[1:]
    try:
        values = np.array([[float(v) for v in row] for row in body])
    except ValueError as exc:
        raise BayesxError(f"model.data_file: {path} has a non-numeric value ({exc}); encode every column as numbers") from None
    return {name: torch.as_tensor(values[:, j], dtype=dtype, device=device) for j, name in enumerate(header)}


def _as_tensor(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> Tensor:
    if array.dtype == np.bool_:
        return torch.as_tensor(array, device=device)
    if np.issubdtype(array.dtype, np.integer):
        return torch.as_tensor(array.astype(np.int64), device=device)
    return torch.as_tensor(array, dtype=dtype, device=device)


def _npz_arrays(path: Path) -> dict[str, np.ndarray]:
    """A .npz file's arrays (numbers or booleans, as stored); a file numpy cannot read, or an array that is not
    numbers, is one line."""
    if not zipfile.is_zipfile(path):
        raise BayesxError(f"model.data_file: {path.name} is not a .npz archive (numpy writes one with "
                          f"numpy.savez(path, name=array)); give a .npz or .csv file")
    try:
        with np.load(path, allow_pickle=False) as arrays:
            return {k: _numeric(k, v) for k, v in arrays.items()}
    except (ValueError, TypeError, OSError, EOFError, zipfile.BadZipFile) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BayesxError(f"model.data_file: cannot read {path.name} as numeric .npz arrays ({reason[:120]}); "
                          f"write it with numpy.savez(path, name=array) of numbers") from None


def _numeric(name: str, array) -> np.ndarray:
    """Integers and booleans as stored, anything else as float64 (a string array, or the raw bytes of a member
    that is not a .npy file, raises ValueError here: one line above)."""
    array = np.asarray(array)
    if array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer):
        return array
    return np.asarray(array, dtype=np.float64)


class CustomModel(TargetBase):
    """The log density of a user's function (see the module docstring)."""

    Settings = CustomSettings
    capabilities = Capabilities(uses_data=False)
    param_name = "theta"

    def __init__(self, settings: CustomSettings | None = None, data=None, device: str | torch.device = "cpu",
                 dtype: torch.dtype = torch.float64, **options):
        self.settings = self.configure(settings, options)
        self.device, self.dtype = torch.device(device), dtype
        self.init_scale = self.settings.init_scale
        self.function = load_function(self.settings.log_density)
        self.parameters = constrained.parse(self.settings.params) if self.settings.params is not None else None
        if self.parameters is None:
            self.dim = int(self.settings.dim)
            self.centre = torch.as_tensor(self.settings.init or [0.0] * self.dim, dtype=dtype, device=self.device)
        else:
            self.dim = constrained.dimension(self.parameters)
            self.function = _taking_parameters(self.function, self.parameters)
            self.centre = (constrained.unconstrain(self.parameters, self.settings.init, dtype).to(self.device)
                           if self.settings.init is not None else torch.zeros(self.dim, dtype=dtype, device=self.device))
        self.data = load_data(self.settings.data_file, dtype, self.device) if self.settings.data_file else None
        self._batched = self._probe()

    def _call(self, q: Tensor) -> Tensor:
        return self.function(q) if self.data is None else self.function(q, self.data)

    def _probe(self) -> Callable[[Tensor], Tensor]:
        """How to evaluate a batch: the function itself if it takes one, else vmap, else a loop; checked
        near the starting point (shape, agreement with one point at a time, finiteness, and a gradient that
        autograd can compute), so a bad function fails in one line before a run.

        The function is taken as batched only where, on each of PROBE_SPREADS' batches, every row equals the
        same point evaluated alone: a function whose value for one chain depends on the other chains (a branch
        on a mean over the batch) is then evaluated point by point, as it is written for one point."""
        name = self.settings.log_density
        first = self.centre[None].clone()
        try:
            single = torch.as_tensor(self._call(first[0]))
        except Exception as exc:  # noqa: BLE001 - maybe a function for batches only; tried on a batch below
            single, single_error = None, exc
        if single is not None and single.numel() != 1:
            raise BayesxError(f"model.log_density {name} returned shape {tuple(single.shape)} for one point of "
                              f"dim {self.dim}; return one log density (a scalar) per point")
        batched = self._batches_agree_with_points() if single is not None else self._takes_batches()
        if batched:
            evaluate, self.evaluation = self._call, "batched"
        elif single is None:  # the user's function failed: say where, in one line
            raise BayesxError(f"model.log_density {name} failed at the starting point: "
                              f"{type(single_error).__name__}: {single_error}{self._dim_hint(single_error)}") from None
        else:
            evaluate, self.evaluation = torch.func.vmap(lambda q: self._call(q).reshape(())), "vmap"
            try:
                evaluate(self._probe_points(PROBE_SPREADS[0]))
            except Exception:  # noqa: BLE001 - vmap cannot trace every function: fall back to a loop
                evaluate = lambda q: torch.stack([self._call(row).reshape(()) for row in q])  # noqa: E731
                self.evaluation = "point by point"
        value = float(evaluate(self.centre[None])[0])
        if not math.isfinite(value):
            raise BayesxError(f"model.log_density {name} is {value} at the starting point {self.centre.tolist()}; "
                              f"fix the function or set model.init to a point of positive density")
        self._no_gradient = self._gradient_problem(evaluate)
        if self._no_gradient is None:
            self._refuse_unused_coordinates(evaluate)
        self.precision_warning = self._float32_inside(evaluate)
        return evaluate

    def _float32_inside(self, evaluate: Callable[[Tensor], Tensor]) -> str:
        """For a float64 run: the first operation of the density that computes in float32, said on stderr in one
        line with the fix, before the run (bayesx.targets.precision); '' where there is none."""
        if self.dtype != torch.float64:
            return ""
        found = float32_operation(evaluate, self.centre[None].clone())
        if found is None:
            return ""
        line = (f"model.log_density {self.settings.log_density} is not float64 throughout: {found} (a "
                f"torch.distributions parameter or a tensor made from Python floats is float32 by default); make "
                f"those tensors with theta.new_tensor(...) or dtype=theta.dtype")
        print(f"bayesx: warning: {line}", file=sys.stderr, flush=True)
        return line

    def _probe_points(self, spread: float) -> Tensor:
        """PROBE_POINTS distinct points, uniform in centre +- spread * init_scale (a batch size other than dim: a
        row of one point is never taken for a batch)."""
        n = PROBE_POINTS + 1 if self.dim == PROBE_POINTS else PROBE_POINTS
        gen = torch.Generator(device="cpu").manual_seed(UNUSED_PROBE_SEED + int(spread * 1000))
        u = torch.rand((n, self.dim), generator=gen, dtype=self.dtype).to(self.device)
        return self.centre + spread * self.init_scale * (2.0 * u - 1.0)

    def _takes_batches(self) -> bool:
        """Whether the function, failing on one point, returns one value per row of a batch."""
        points = self._probe_points(PROBE_SPREADS[0])
        try:
            out = torch.as_tensor(self._call(points))
        except Exception:  # noqa: BLE001 - it fails on batches too: reported from the one-point call
            return False
        return out.shape == (len(points),)

    def _batches_agree_with_points(self) -> bool:
        """Whether the function evaluates batches row by row: one value per row, each equal to the row's point
        evaluated alone, on batches of every spread (rows where the function fails or is not finite alone are not
        compared)."""
        for spread in PROBE_SPREADS:
            points = self._probe_points(spread)
            try:
                out = torch.as_tensor(self._call(points))
            except Exception:  # noqa: BLE001 - a function written for one point
                return False
            if out.shape != (len(points),):
                return False
            for row, value in zip(points, out):
                try:
                    alone = torch.as_tensor(self._call(row)).reshape(())
                except Exception:  # noqa: BLE001 - outside what the function takes alone: not compared
                    continue
                both_finite = bool(torch.isfinite(alone)) and bool(torch.isfinite(value))
                if both_finite and not torch.allclose(value, alone, rtol=1e-5, atol=1e-6):
                    return False
                if not both_finite and not (torch.equal(value, alone) or (value.isnan() and alone.isnan())):
                    return False
        return True

    def _dim_hint(self, exc: Exception) -> str:
        """For an index or shape error: a pointer at model.dim, the likeliest cause."""
        text = str(exc).lower()
        if isinstance(exc, IndexError) or any(w in text for w in ("index", "size", "shape", "dimension")):
            return (f" (model.dim={self.dim}: check that it is the number of parameters the function reads from "
                    f"theta)")
        return ""

    def _refuse_unused_coordinates(self, evaluate: Callable[[Tensor], Tensor]) -> None:
        """Refuse a density that does not depend on some coordinates: there the posterior is flat, hence
        improper (a model.dim larger than the coordinates the function reads, or a parameter without a
        prior). Coordinate j is unused where, at UNUSED_PROBES random points around the start, the gradient's
        j-th entry is exactly 0 and moving theta_j by +-init_scale leaves the log density exactly unchanged:
        a density that uses theta_j has a zero partial derivative at one point by chance, never at all of
        them together with equal values on both sides."""
        gen = torch.Generator(device="cpu").manual_seed(UNUSED_PROBE_SEED)
        u = torch.rand((UNUSED_PROBES, self.dim), generator=gen, dtype=self.dtype).to(self.device)
        points = (self.centre + self.init_scale * (2.0 * u - 1.0)).requires_grad_(True)
        with torch.enable_grad():
            values = torch.as_tensor(evaluate(points))
            (grad,) = torch.autograd.grad(values.sum(), points)
        values = values.detach()
        if not bool(torch.isfinite(values).all()):  # some probes outside the support: no verdict
            return
        flat = (grad == 0).all(0)
        with torch.no_grad():
            for j in torch.nonzero(flat).flatten().tolist():
                for shift in (self.init_scale, -self.init_scale):
                    moved = points.detach().clone()
                    moved[:, j] += shift
                    if not bool(torch.equal(torch.as_tensor(evaluate(moved)), values)):
                        flat[j] = False
                        break
        unused = torch.nonzero(flat).flatten().tolist()
        if not unused:
            return
        name = self.settings.log_density
        if len(unused) == self.dim:
            raise BayesxError(f"model.log_density {name} does not depend on theta (it is constant around the "
                              f"starting point): the posterior is improper; return the log density of a proper "
                              f"posterior (add a prior on every parameter)")
        names = self.coordinate_names() or [f"theta[{j}]" for j in range(self.dim)]
        shown = ", ".join(names[j] for j in unused)
        hint = (f"if the function uses only the first {unused[0]} coordinates, set model.dim={unused[0]}; "
                if unused == list(range(unused[0], self.dim)) else "")
        raise BayesxError(f"model.log_density {name} does not depend on {shown} (the posterior is flat, hence "
                          f"improper, along {'it' if len(unused) == 1 else 'them'}): {hint}else add a prior on "
                          f"{'it' if len(unused) == 1 else 'them'} in the function")

    def _gradient_problem(self, evaluate: Callable[[Tensor], Tensor]) -> str | None:
        """Autograd's gradient at the starting point: it must exist (a function that calls numpy, .item() or
        .detach() cuts the graph) and be finite; else why not, for methods that use gradients."""
        name = self.settings.log_density
        point = self.centre[None].clone().requires_grad_(True)
        try:
            (grad,) = torch.autograd.grad(torch.as_tensor(evaluate(point)).sum(), point)
        except RuntimeError as exc:
            return (f"model.log_density {name} has none autograd can compute ({str(exc).splitlines()[0]}): write it "
                    f"in torch operations, without numpy, .item() or .detach() on theta")
        if not bool(torch.isfinite(grad).all()):
            return f"model.log_density {name}'s gradient is not finite at the starting point {self.centre.tolist()}"
        return None

    def gradient_problem(self) -> str | None:
        return self._no_gradient

    def log_prob(self, q: Tensor) -> Tensor:
        """The user's log density at each row of ``q`` (..., dim). Where it raises on a batch, the rows out of the
        floating-point range (:meth:`_representable_rows`: where a diverging sampler went, and where
        ``torch.distributions``' argument checks raise) get log density -inf and the others are evaluated alone, so
        the sampler rejects that proposal, as Stan rejects one whose density raises a domain error. A failure at
        finite values is the user's function failing: one line, and the run stops with what it had."""
        flat = q.reshape(-1, self.dim)
        try:
            return self._batched(flat).reshape(q.shape[:-1])
        except Exception as exc:  # noqa: BLE001 - the user's function failed mid-run: one line, the run stops
            finite = self._representable_rows(flat)
            if not bool(finite.all()):
                try:
                    return self._without(flat, finite).reshape(q.shape[:-1])
                except Exception:  # noqa: BLE001 - it fails at finite points too: say so below
                    pass
            first = exc.args[0] if exc.args else ""
            raise DensityError(f"model.log_density {self.settings.log_density} raised {type(exc).__name__}"
                               f"{': ' + str(first).splitlines()[0] if str(first) else ''} at a batch of "
                               f"{flat.shape[0]} points (e.g. {self._failing_row(flat)}); the run stopped with what "
                               f"it had") from None

    def _representable_rows(self, flat: Tensor) -> Tensor:
        """Rows (bool, (n,)) whose unconstrained coordinates are below log(largest float) in size (about 709.8 in
        float64), so that exp of each, and of its negative, is a positive finite number (a user's ``q.exp()`` as a
        scale is not 0), and whose constrained values are finite: the rows where a failure is the function's own."""
        with torch.no_grad():
            far = math.log(torch.finfo(flat.dtype).max)
            inside = (flat.abs() < far).all(-1)
            return inside & torch.isfinite(self.constrain(flat.detach())).reshape(len(flat), -1).all(-1)

    def _without(self, flat: Tensor, finite: Tensor) -> Tensor:
        """log pi at the ``finite`` rows, -inf at the others (differentiable in the finite rows)."""
        rows = torch.nonzero(finite).squeeze(-1)
        # -inf in the graph of ``flat`` with a zero gradient (autograd needs one even where every row overflowed)
        values = torch.where(torch.isfinite(flat), flat, torch.zeros_like(flat)).sum(-1) * 0.0 - math.inf
        if len(rows) == 0:
            return values
        return values.index_put((rows,), self._batched(flat[rows]).reshape(-1).to(values.dtype))

    def _failing_row(self, flat: Tensor) -> list[float]:
        """A row at which the function fails alone (the batch's first row where none does)."""
        for row in flat.detach():
            try:
                self._batched(row[None])
            except Exception:  # noqa: BLE001 - this is the row to show
                return row.tolist()
        return flat[0].tolist()

    def initial_point(self, n_chains: int, gen: torch.Generator) -> Tensor:
        u = torch.rand((n_chains, self.dim), generator=gen, dtype=self.dtype, device=self.device)
        return self.centre + self.init_scale * (2.0 * u - 1.0)

    def coordinate_names(self) -> list[str] | None:
        if self.parameters is not None:  # the sampled coordinates: each parameter's unconstrained numbers
            return [p.name if p.size == 1 and not p.shape and p.kind == "real" else
                    f"unconstrained({p.name})" + (f"[{i}]" if p.size > 1 else "")
                    for p in self.parameters for i in range(p.size)]
        return list(self.settings.param_names) if self.settings.param_names else None

    def constrain(self, q: Tensor) -> Tensor:
        if self.parameters is None:
            return q
        return constrained.flatten(self.parameters, constrained.constrain(self.parameters, q)[0])

    def reported_names(self) -> list[str]:
        if self.parameters is None:
            return super().reported_names()
        return constrained.reported_names(self.parameters)

    def parameter_shapes(self) -> dict[str, tuple[int, ...]] | None:
        if self.parameters is None:
            return None
        return {p.name: p.shape for p in self.parameters}

    def content_digests(self) -> dict[str, str]:
        """What identifies this posterior for the reference cache, resume and the compiled cache: the density by
        what it computes (:meth:`fingerprint`, so an edit in a module the function imports counts and a renamed or
        re-commented file does not) and the data file by its bytes."""
        digests = {"log_density": self.fingerprint()}
        if self.settings.data_file:
            digests["data_file"] = sha256_of(Path(self.settings.data_file).expanduser())
        return digests

    def fingerprint(self) -> str:
        """SHA-256 of the log density and its gradient at fixed points around the start (two at each of
        FINGERPRINT_SCALES init_scales), rounded to 10 significant digits in float64 (5 in float32) so that a
        reduction's order does not change it; a point where the function raises contributes its exception's
        type, so a density that fails only far out is told from one that does not."""
        digits = 10 if self.dtype == torch.float64 else 5
        gen = torch.Generator(device="cpu").manual_seed(UNUSED_PROBE_SEED)
        digest = hashlib.sha256(f"dim={self.dim};dtype={self.dtype}".encode())
        for scale in FINGERPRINT_SCALES:
            noise = torch.randn((2, self.dim), generator=gen, dtype=torch.float64).to(self.dtype).to(self.device)
            points = (self.centre + scale * self.init_scale * noise).requires_grad_(True)
            try:
                with torch.enable_grad():
                    values = torch.as_tensor(self._batched(points))
                    grad = (torch.autograd.grad(values.sum(), points)[0] if self._no_gradient is None
                            else torch.zeros_like(points))
            except Exception as exc:  # noqa: BLE001 - a failure is part of what the density computes
                digest.update(f"{scale}:{type(exc).__name__};".encode())
                continue
            numbers = torch.cat([values.detach().reshape(-1), grad.detach().reshape(-1)]).double().cpu().tolist()
            digest.update((f"{scale}:" + ",".join(f"{x:.{digits}g}" for x in numbers) + ";").encode())
        return digest.hexdigest()

    def describe(self) -> dict[str, str]:
        tags = {"dim": str(self.dim), "log_density": self.settings.log_density, "evaluation": self.evaluation}
        if self.settings.data_file:
            tags["data_file"] = str(self.settings.data_file)
        if self.settings.param_names:
            tags["param_names"] = ",".join(self.settings.param_names)
        if self.parameters is not None:
            tags["params"] = ", ".join(f"{name}: {spec}" for name, spec in self.settings.params.items())
        if self.precision_warning:
            tags["precision_warning"] = self.precision_warning
        return tags


class Parameters(dict):
    """The constrained parameters a declared density takes: by attribute (``p.tau``) or by key (``p["tau"]``)."""

    def __getattr__(self, name: str) -> Tensor:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"no parameter '{name}' is declared in model.params (declared: "
                                 f"{', '.join(self)})") from None


def _taking_parameters(function: Callable, declared: tuple) -> Callable:
    """The user's density of named, constrained parameters as a density of the unconstrained vector: the values
    mapped onto their supports (bayesx.targets.parameters) and the map's log-Jacobian added."""
    def log_density(theta: Tensor, data: dict | None = None) -> Tensor:
        values, log_jacobian = constrained.constrain(declared, theta)
        p = Parameters(values)
        value = function(p) if data is None else function(p, data)
        return torch.as_tensor(value) + log_jacobian
    return log_density
