"""Large data stays data: a compiled density reads its data arrays from a blob passed at run time, not from numbers
written into its C source, so a data set of millions of numbers compiles as plain C in seconds, the same library
serves other data of the same shapes, and a density found by its identity maps its data file instead of tracing.
Where a density leaves plain C for AOTInductor, the first line says why.
"""

from __future__ import annotations

import shutil
import time

import pytest
import torch
import torch.nn.functional as F
from test_compiled_loops import _agrees_with_eager

from bayesx.kernels import backend
from bayesx.native import codegen, compiled
from bayesx.native import logistic as native

pytestmark = pytest.mark.skipif(not (native.available() and shutil.which("cc")), reason="no C compiler here")

ROWS, FEATURES = 20_000, 60  # 1.2 million numbers of design, 20,000 labels


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("BAYESX_CACHE_DIR", str(tmp_path / "cache"))


def _data(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, FEATURES, generator=g, dtype=torch.float64)
    y = (torch.rand(ROWS, generator=g) < torch.sigmoid(x[:, :5].sum(-1))).to(torch.int64)
    return x, y


def _logistic(x: torch.Tensor, y: torch.Tensor):
    """A logistic regression as a user writes it: integer labels, F.binary_cross_entropy_with_logits."""
    def log_density(theta):
        logits = theta[..., :1] + theta[..., 1:] @ x.T
        labels = y.to(logits.dtype).expand_as(logits)
        return -F.binary_cross_entropy_with_logits(logits, labels, reduction="none").sum(-1) \
            - 0.5 * (theta / 2.5).square().sum(-1)
    return log_density


def _agrees(density: compiled.CompiledDensity, log_prob, seed: int = 0) -> None:
    """At three points near the origin, to 1e-10 relative (a sum over 20,000 rows: 1e-8 absolute)."""
    q = 0.05 * torch.randn(3, FEATURES + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    _agrees_with_eager(log_prob, density, FEATURES + 1, q, rtol=1e-10, atol=1e-8)


def test_data_over_a_million_numbers_compile_as_plain_c_with_the_data_outside_the_source():
    x, y = _data(0)
    log_prob = _logistic(x, y)
    graph = compiled._trace(log_prob, FEATURES + 1, torch.float64)
    generated = codegen.generate(graph, FEATURES + 1, torch.float64)
    assert generated.data is not None and generated.data.numel() >= x.numel() * 8  # the design is data
    assert len(generated.source) < 50_000  # a few hundred lines: not 1.2 million numbers of source
    started = time.perf_counter()
    density = compiled.compiled_density(log_prob, FEATURES + 1, torch.float64)
    assert density.compiler == "plain C", density
    print(f"compiled {x.numel() + y.numel():,} numbers of data as plain C in {time.perf_counter() - started:.2f} s")
    _agrees(density, log_prob)


def test_other_data_of_the_same_shapes_reuse_the_library_and_get_their_own_answers():
    """The library depends on the data's shapes only: a second data set of the same shapes is the same library (no
    compile), loaded with its own data, and agrees with autograd on its own data (control: the first data set's
    answers differ from the second's, so agreeing with each is not agreeing with either)."""
    first_log_prob, second_log_prob = _logistic(*_data(0)), _logistic(*_data(1))
    first = compiled.compiled_density(first_log_prob, FEATURES + 1, torch.float64)
    second = compiled.compiled_density(second_log_prob, FEATURES + 1, torch.float64)
    assert second.library_path == first.library_path and second.cached and not first.cached
    _agrees(first, first_log_prob)
    _agrees(second, second_log_prob)
    q = torch.full((1, FEATURES + 1), 0.1, dtype=torch.float64)
    assert not torch.allclose(first.log_prob_and_grad(q)[0], second.log_prob_and_grad(q)[0])


def test_a_density_found_by_its_identity_maps_its_data_file_and_a_damaged_one_is_traced_afresh():
    x, y = _data(2)
    log_prob = _logistic(x, y)
    compiled.compiled_density(log_prob, FEATURES + 1, torch.float64, identity="glm-20000")
    data_files = list((compiled.cache_dir().parent / "compiled").glob("data-*.bin"))
    assert len(data_files) == 1
    traced = []
    original_trace = compiled._trace
    tracing = lambda *args: traced.append(1) or original_trace(*args)  # noqa: E731
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled, "_trace", tracing)
        known = compiled.compiled_density(log_prob, FEATURES + 1, torch.float64, identity="glm-20000")
        assert not traced and known.cached and known.compiler == "plain C"
        _agrees(known, log_prob)
        # the data file damaged (a byte changed): its seal refuses it, and the density is traced again
        raw = bytearray(data_files[0].read_bytes())
        raw[100] ^= 0xFF
        data_files[0].write_bytes(bytes(raw))
        again = compiled.compiled_density(log_prob, FEATURES + 1, torch.float64, identity="glm-20000")
        assert traced, "a damaged data file was used"
        _agrees(again, log_prob)


def test_data_read_from_the_wrong_blob_is_refused_by_the_compile_check():
    """Negative control for the blob's layout: the library given another data set's blob of the same size computes
    another density, and the compile check (against autograd on the density's own data) refuses it."""
    log_prob = _logistic(*_data(3))
    graph = compiled._trace(log_prob, FEATURES + 1, torch.float64)
    path, _, data = compiled._write_plain_c(graph, FEATURES + 1, torch.float64,
                                            compiled.cache_dir().parent / "compiled")
    other = compiled._trace(_logistic(*_data(4)), FEATURES + 1, torch.float64)
    wrong = codegen.generate(other, FEATURES + 1, torch.float64).data
    assert wrong.numel() == data.numel() and not torch.equal(wrong, data)
    functions = compiled.bind(compiled.load("kernels"), "f64", compiled.load("kernels")._name)
    density = compiled._load(path, FEATURES + 1, torch.float64, 0.0, True, functions, wrong)
    with pytest.raises(compiled.NotCompiled, match="differs"):
        compiled._check(density, log_prob, FEATURES + 1, torch.float64)
    with pytest.raises(compiled.NotCompiled, match="reads .* bytes of data, given 0"):
        compiled._load(path, FEATURES + 1, torch.float64, 0.0, True, functions, None)


def test_a_compiled_density_that_is_not_plain_c_says_why_in_its_tag():
    prepared = backend.Preparation(backend.COMPILED, 12.0, False, "no C for the operator aten.erfinv.default",
                                   compiler="AOTInductor")
    assert prepared.tags() == {"compiled_density": "compiled in 12.0 s; not plain C: no C for the operator "
                                                   "aten.erfinv.default", "density_compiler": "AOTInductor"}
    plain = backend.Preparation(backend.COMPILED, 1.0, False, compiler="plain C")
    assert plain.tags() == {"compiled_density": "compiled in 1.0 s", "density_compiler": "plain C"}


class _Erfinv:
    """A target whose density uses erfinv: no plain C for it, AOTInductor compiles it."""

    dim, dtype, device = 3, torch.float64, torch.device("cpu")

    def density_form(self):
        return None

    def autograd_log_prob(self):
        return lambda q: -0.5 * torch.erfinv(torch.tanh(q)).square().sum(-1) - 0.5 * q.square().sum(-1)

    def log_prob(self, q):
        return self.autograd_log_prob()(q)

    def log_prob_and_grad(self, q):
        x = q.detach().requires_grad_(True)
        value = self.log_prob(x)
        return value.detach(), torch.autograd.grad(value.sum(), x)[0]


@pytest.mark.slow
def test_the_first_line_of_an_aotinductor_density_gives_the_plain_c_reason(capsys):
    density = backend.prepare(_Erfinv(), backend.Workload(torch.zeros(4, 3, dtype=torch.float64), calls=10**6),
                              "auto")
    assert density.name == backend.COMPILED, density.record
    line = capsys.readouterr().err.strip().splitlines()[0]
    assert "(AOTInductor because plain C could not: no C for the operator aten.erfinv.default)" in line, line
    assert "not plain C: no C for the operator aten.erfinv.default" in density.record.tags()["compiled_density"]
