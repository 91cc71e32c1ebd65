"""The C library's entry points, declared once: each function's parameter and return types.

ctypes trusts whatever argument types it is given; a declaration that disagrees with the C function
(one parameter more or fewer, an int where a double goes) passes garbage and crashes the process
somewhere later. So the types are written once, in :data:`ENTRY_POINTS`, one letter per parameter:

    i  int        r  the library's real (double in the f64 functions, float in the f32 ones)
    p  pointer    v  (return only) nothing

and the library states its own in the same letters (``bayesx_signature(name)`` in kernels.c,
with d and f for the reals). :func:`bind` compares the two for every entry point before any is called,
and a difference is a one-line :class:`NativeSignatureError` naming the function and both signatures.
"""

from __future__ import annotations

import ctypes
from typing import NamedTuple

from bayesx.errors import BayesxError


class NativeSignatureError(BayesxError):
    """The compiled library's functions do not take what bayesx declares for them."""


class EntryPoint(NamedTuple):
    """One C function: its parameter letters, its return letter, and whether it exists once per
    precision (``<name>_f64`` and ``<name>_f32``) or once (``<name>``)."""

    params: str
    returns: str = "v"
    per_precision: bool = True


FORM = "ppppipr"  # A^T, c, y, P, whether P is dense, b, the constant (bayesx.targets.forms.LogisticForm)
NUTS_TAIL = "pirippppppp"  # M^-1, dense, eps, max depth, seeds, u, p, g, lp, info, failed (bayesx.native.nuts)

ENTRY_POINTS: dict[str, EntryPoint] = {
    # threads, chains, n, k, the form, u, grad, log pi, work
    "logistic_density": EntryPoint("iiii" + FORM + "pppp"),
    # threads, pairs, chains, n, k, steps, the form, M^-1, dense, eps, u, p, g, start known, out, work
    "logistic_leapfrog": EntryPoint("iiiiii" + FORM + "pippppipp"),
    # threads, pairs, chains, n, k, the form, then NUTS's own
    "logistic_nuts": EntryPoint("iiiii" + FORM + NUTS_TAIL),
    # threads, chains, k, the compiled model and its kind (bayesx.native.compiled), u, grad, log pi
    "compiled_density": EntryPoint("iiipippp"),
    # threads, chains, k, steps, the compiled model and its kind, M^-1, dense, eps, u, p, g, start known, out, work
    "compiled_leapfrog": EntryPoint("iiiipipippppipp"),
    # threads, chains, k, the compiled model and its kind, then NUTS's own
    "compiled_nuts": EntryPoint("iiipi" + NUTS_TAIL),
    # the compiled model and its kind -> scratch numbers one evaluation needs
    "compiled_scratch": EntryPoint("pi", "i"),
    "logistic_work_size": EntryPoint("ii", "i", per_precision=False),  # (n, k) -> scratch numbers per thread
    "logistic_openmp": EntryPoint("", "i", per_precision=False),  # whether one call can use several threads
}

REALS = {"f64": ("d", ctypes.c_double), "f32": ("f", ctypes.c_float)}
"""The precision suffixes: the real's letter in the library's signatures, and its ctypes type."""


def symbol(name: str, suffix: str) -> str:
    """The exported name of entry point ``name`` at precision ``suffix``."""
    return f"{name}_{suffix}" if ENTRY_POINTS[name].per_precision else name


def declared(name: str, suffix: str) -> str:
    """The signature bayesx declares for an entry point, as the library writes it: ``params->returns``."""
    entry = ENTRY_POINTS[name]
    return f"{entry.params}->{entry.returns}".replace("r", REALS[suffix][0])


def bind(library: ctypes.CDLL, suffix: str, path: str = "the native library") -> dict[str, ctypes._CFuncPtr]:
    """Every entry point of ``library`` at precision ``suffix``, its argtypes and restype set from the table,
    after checking the table against the library's own signatures (NativeSignatureError on a difference)."""
    c_type = {"i": ctypes.c_int, "p": ctypes.c_void_p, "v": None, "d": ctypes.c_double, "f": ctypes.c_float}
    try:
        exported_signature = library.bayesx_signature
    except AttributeError:
        raise NativeSignatureError(f"{path} does not export bayesx_signature; delete it so that it is "
                                   "rebuilt (python -m bayesx.native.build)") from None
    exported_signature.argtypes, exported_signature.restype = [ctypes.c_char_p], ctypes.c_char_p
    functions = {}
    for name in ENTRY_POINTS:
        exported_name, ours = symbol(name, suffix), declared(name, suffix)
        theirs = exported_signature(exported_name.encode())
        theirs = theirs.decode() if theirs is not None else "absent"
        if theirs != ours:
            raise NativeSignatureError(f"{path}: the C function {exported_name} has signature {theirs}, but "
                                       f"bayesx.native.entry_points declares {ours}; make the two agree")
        function = getattr(library, exported_name)
        params, returns = ours.split("->")
        function.argtypes = [c_type[letter] for letter in params]
        function.restype = c_type[returns]
        functions[name] = function
    return functions
