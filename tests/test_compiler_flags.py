"""The flags bayesx compiles C with (bayesx.native.build.THIS_CPU) keep a copy of a constant array exact.

GCC 12.2 tuning for an Ice Lake class CPU (``-march=native`` alone, on this machine's Xeon) wrote the gradient of a
masked sum, a constant array {a, a, a, 0, 0, 0, ...} copied into the gradient, as {a, a, a, a, 0, 0, ...}
(tests/test_codegen_ops.py found it: ``masked.sum[37] transposed``). The copy below is the loop the plain C writer
emits; it is built with each set of flags bayesx uses, and, as a control, with the tuning that miscompiles it.
"""

from __future__ import annotations

import ctypes
import subprocess

import pytest

from bayesx.native import build

VALUES = (0.5610532747196236,) * 3 + (0.0,) * 3 + (-0.7245545065676504,) * 3 + (0.6770992274477555,) * 3
SOURCE = ("#include <stdint.h>\nstatic const double c[12] = {" + ", ".join(map(repr, VALUES)) + "};\n"
          "void copy(double *restrict g) { for (int64_t j = 0; j < 12; j++) g[j] = (double)c[j]; }\n")


def _copied(flags: tuple[str, ...], folder) -> tuple[float, ...]:
    source = folder / "copy.c"
    source.write_text(SOURCE)
    library = folder / "copy.so"
    build.build(_compiler(), source, library, compile_flags=flags)
    out = (ctypes.c_double * 12)()
    ctypes.CDLL(str(library)).copy(out)
    return tuple(out)


def _compiler() -> str:
    compiler = build._compiler()
    if compiler is None:
        pytest.skip("no C compiler")
    return compiler


@pytest.mark.parametrize("flags", [build.PLAIN_C_FLAGS, build.COMPILE_FLAGS], ids=["plain-C", "native-kernels"])
def test_a_constant_array_is_copied_exactly(flags, tmp_path):
    assert _copied(flags, tmp_path) == VALUES


def test_control_the_cpus_own_tuning_miscompiles_the_copy_where_this_compiler_has_the_bug(tmp_path):
    """Where this compiler has the bug (GCC 12 with an Ice Lake tuning: x86-64 only), the same flags with
    ``-mtune=icelake-server`` for ``-mtune=generic`` copy the array wrong; elsewhere it skips, saying so."""
    tuned = tuple("-mtune=icelake-server" if flag == "-mtune=generic" else flag for flag in build.PLAIN_C_FLAGS)
    try:
        copied = _copied(tuned, tmp_path)
    except (OSError, subprocess.SubprocessError):
        pytest.skip("this compiler does not take -mtune=icelake-server (not x86-64, or not GCC)")
    if copied == VALUES:
        pytest.skip("this compiler copies the array right even with the Ice Lake tuning (not GCC 12.2's bug)")
    assert copied[3] != VALUES[3] and copied[4:] == VALUES[4:]
