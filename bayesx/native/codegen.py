"""A traced density and gradient as plain C: one function, no torch at run time, compiled in about a second.

AOTInductor (bayesx.native.compiled) compiles a density's gradient graph well, but slowly: 8-26 s of Python
lowering and a C++ wrapper compile per density on this project's machine, longer than NumPyro's whole run on
a small posterior. The graphs a density traces to are small and of few kinds of operation (posteriordb's 13
posteriors use 41 ATen operators after core-ATen decomposition), so this module writes C for them directly:

1. interpret: the graph runs once, eagerly, on a point (the zero vector), operation by operation; every
   tensor the graph computes from the parameters gets a buffer in a workspace, laid out contiguously (the
   eager result is copied into a fresh contiguous tensor, so that the views taken of it later have the
   strides and offsets of the buffer); a view (``view``, ``expand``, ``permute``, ``select``, ...) shares
   its input's storage, so it is recognised by that, costs no code, and is read through its own sizes,
   strides and offset; what does not depend on the parameters (data, ``arange``, ``full``) is a constant
   array, its bytes those of the eager value: written into the source where it is small (INLINE_NUMBERS), else
   *data*, packed into one byte blob (:attr:`Generated.data`) that the caller passes at run time, so that the
   source, its compile time and the library depend on the data's shapes, not on its size or its values;
2. write: each other operation becomes a loop nest over its output, reading every input through its
   strides (broadcast dimensions have stride 0): elementwise arithmetic and comparisons, reductions,
   matrix products, concatenation, padding, slice and select scatters, advanced indexing and its
   accumulating inverse, gather and scatter-add;
3. reuse: a buffer whose last reader (views included) has run is handed to the next buffer of its size,
   so the workspace stays near the graph's live size.

The result is ``int bayesx_density(const REAL *u, REAL *g, REAL *lp, void *work, int64_t *fault, const char *data)``
writing log pi(u) to lp and its gradient to g, with ``bayesx_density_work`` bytes of workspace per calling thread and
``data`` the blob of ``bayesx_density_data_bytes`` bytes (NULL where there is none; 64-byte aligned):
reentrant, so the C kernels may run chains on several threads. It returns 0, or 1 where PyTorch would raise: an
index computed from the parameters (advanced indexing, index_select, gather, scatter_add, index_add, embedding)
outside its dimension is checked, as PyTorch checks it, and the evaluation stops with the check's number, the
index, the size and the dimension in fault[0..3] (``bayesx_density_check(number)`` names its operator); reading
past a table would return a number where PyTorch raises IndexError. Operators outside the table raise
:class:`Unsupported` with the operator's name; the caller then tries AOTInductor. C's own math library evaluates the functions
(``exp``, ``log1p``, ``lgamma``, ...), compiled without ``-ffast-math`` so that infinities and NaNs keep
their meaning (a log density of -inf outside the support).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from bayesx.native import loops

aten = torch.ops.aten

C_TYPES = {torch.float64: "double", torch.float32: "float", torch.int64: "int64_t", torch.int32: "int32_t",
           torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "uint8_t"}
ALIGN = 64
SIMD_MIN = 16
"""The shortest innermost elementwise loop marked ``omp simd``: shorter ones (an ODE's 2-4 states, repeated over 400
steps) gain nothing from vectors and cost the C compiler's vectorizer time on every one of them (lotka_volterra's cold
compile went from 7.6-8.5 to 22.7 CPU s with every loop marked)."""
INLINE_NUMBERS = 4096
"""A constant of at most this many numbers is written into the C source (where the compiler may fold it: a loop's
step sizes, a small table); a larger one is data, passed at run time (:attr:`Generated.data`). Written as source,
data cost about 25 characters a number and the compiler's time grew with them (the 550 x 500 logistic design,
275,000 numbers, took 1.3 s; a 100,000 x 61 design, 6.1 million, would take minutes), and every new data set was a
new library."""


DIGAMMA = r"""/* digamma(x) = d/dx log Gamma(x), which C's library lacks (lgamma's derivative): the reflection
 * psi(x) = psi(1 - x) - pi / tan(pi x) below 0, the recurrence psi(x) = psi(x + 1) - 1/x up to 10, then the
 * asymptotic series log x - 1/(2x) - sum B_2k / (2k x^2k) (Abramowitz and Stegun 6.3.18; relative error
 * below 1e-15 from 10 on). As torch's: -inf at 0, NaN at the negative integers. */
static double bx_digamma(double x) {
    if (x == 0) return -INFINITY;
    if (x < 0) {
        if (x == floor(x)) return NAN;
        return bx_digamma(1 - x) - 3.14159265358979323846 / tan(3.14159265358979323846 * x);
    }
    double shift = 0;
    while (x < 10) { shift -= 1 / x; x += 1; }
    double r = 1 / (x * x);
    double series = r * (1.0 / 12 - r * (1.0 / 120 - r * (1.0 / 252 - r * (1.0 / 240 - r * (1.0 / 132)))));
    return shift + log(x) - 0.5 / x - series;
}"""


TRIGAMMA = r"""/* trigamma(x) = d/dx digamma(x), digamma's derivative (what autograd calls polygamma(1, x)): the reflection
 * psi1(x) = pi^2 / sin^2(pi x) - psi1(1 - x) below 0, the recurrence psi1(x) = psi1(x + 1) + 1/x^2 up to 10, then
 * 1/x + 1/(2x^2) + sum B_2k / x^(2k+1) (Abramowitz and Stegun 6.4.12). */
static double bx_trigamma(double x) {
    if (x <= 0 && x == floor(x)) return INFINITY;
    if (x < 0) {
        double s = sin(3.14159265358979323846 * x);
        return 9.86960440108935861883 / (s * s) - bx_trigamma(1 - x);
    }
    double shift = 0;
    while (x < 10) { shift += 1 / (x * x); x += 1; }
    double r = 1 / (x * x);
    double series = 1 / x + r / 2 + r / x * (1.0 / 6 - r * (1.0 / 30 - r * (1.0 / 42 - r * (1.0 / 30 - r * (5.0 / 66)))));
    return shift + series;
}"""


FAIL = r"""/* The evaluation fails, as PyTorch raises: an index out of bounds (bounds check number `check`, the index
 * `value` along dimension `dim` of `size`) is written to fault, and the function returns 1 (0: evaluated). */
#define BX_FAIL(check, value, size, dim) \
    do { fault[0] = (check); fault[1] = (value); fault[2] = (size); fault[3] = (dim); return 1; } while (0)"""


class Unsupported(Exception):
    """Why a graph cannot be written as C here (one line)."""


@dataclass
class Generated:
    """The C source of a density and gradient, and the workspace one call needs (bytes)."""

    source: str
    work_bytes: int
    operations: int
    allocated_bytes: int  # what the buffers would take without reuse
    checks: list[str] = field(default_factory=list)  # the operator of each bounds check, by its number
    folded: loops.Folded | None = None  # the repeated blocks written as C loops (None: not folded)
    data: Tensor | None = None  # the data passed at run time: one uint8 blob, each array at a 64-byte offset


@dataclass
class _Buffer:
    name: str
    c_type: str
    numbers: int
    constant: bool = False


def _literal(value, c_type: str) -> str:
    """A Python number as a C literal of ``c_type`` (exact for doubles: repr round-trips)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if c_type in ("double", "float"):
        value = float(value)
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(value)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"({text}f)" if c_type == "float" else f"({text})"
    if isinstance(value, float):
        if value != int(value):
            raise Unsupported(f"a fractional scalar {value} meets an integer tensor")
        value = int(value)
    return f"((int64_t){int(value)}LL)" if abs(int(value)) > 2**31 - 1 else f"({int(value)})"


def _c_type(dtype: torch.dtype) -> str:
    if dtype not in C_TYPES:
        raise Unsupported(f"tensors of {dtype} are not written as C")
    return C_TYPES[dtype]


class _Writer:
    """The interpreter and C writer of one graph (module docstring)."""

    def __init__(self, graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, fold_loops: bool = True,
                 simd_math: str = ""):
        self.graph, self.dim, self.dtype = graph, dim, dtype
        self.fold_loops = fold_loops
        self.simd_math = simd_math
        self.real = _c_type(dtype)
        self.buffers: dict[int, _Buffer] = {}  # storage address -> buffer
        self.storages: dict[int, object] = {}  # storage address -> storage (kept alive: addresses stay unique)
        self.constants: list[str] = []
        self.constant_names: dict[str, str] = {}  # a constant's type, size and numbers -> its array's name
        self.data: list[tuple[str, str, Tensor, int]] = []  # run-time data: (name, C type, flat values, offset)
        self.data_bytes = 0
        self.body: list[str] = []
        self.env: dict[torch.fx.Node, object] = {}
        self.dynamic: set[torch.fx.Node] = set()
        self.offsets: dict[str, tuple[int, int]] = {}  # workspace buffer -> (byte offset, bytes)
        self.free: dict[int, list[int]] = {}  # bytes -> free offsets
        self.work_bytes = 0
        self.allocated_bytes = 0
        self.counter = 0
        self.operations = 0
        self.last_reader: dict[torch.fx.Node, int] = {}  # node -> position of its last reader (run)
        self.lifetimes: dict[int, int] = {}  # workspace storage -> position of its last reader (views included)
        self.expiring: dict[int, list[int]] = {}  # position -> storages whose lifetime may end there
        self.addresses: dict[str, tuple[str, int]] = {}  # workspace buffer -> (C type, byte offset), kept
        self.segments: list[list[str]] = []  # the body's lines, one list per graph node (loops.fold's input)
        self.position = 0  # of the node being written
        self.target = ""  # the operator being written (what a failed bounds check names)
        self.checks: list[str] = []  # the operator of each bounds check (its number: the position here)
        self.checked: dict[tuple, int] = {}  # an index tensor's layout and bound -> its bounds check

    # -- buffers --------------------------------------------------------------------------------------------
    def _name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def _storage_key(self, t: Tensor) -> int:
        return t.untyped_storage().data_ptr()

    def _constant(self, t: Tensor) -> None:
        """Register the storage of a value that does not depend on the parameters as a constant array."""
        key = self._storage_key(t)
        if key in self.buffers:
            return
        storage = t.untyped_storage()
        numbers = storage.nbytes() // t.element_size()
        c_type = _c_type(t.dtype)
        flat = torch.empty(0, dtype=t.dtype).set_(storage, 0, (numbers,), (1,))
        if numbers > INLINE_NUMBERS:
            self.buffers[key] = _Buffer(self._data_array(flat, c_type), c_type, numbers, constant=True)
            self.storages[key] = storage
            return
        values = flat.tolist()
        text = ",".join(_literal(v, c_type) if c_type in ("double", "float") else str(int(v)) for v in values)
        declaration = f"{c_type} [{max(numbers, 1)}] = {{{text or '0'}}};"
        name = self.constant_names.get(declaration)  # the same numbers (a loop's step's 0 or 1) once
        if name is None:
            name = self.constant_names[declaration] = self._name("c")
            self.constants.append(f"static const {c_type} {name}[{max(numbers, 1)}] = {{{text or '0'}}};")
        self.buffers[key] = _Buffer(name, c_type, numbers, constant=True)
        self.storages[key] = storage

    def _data_array(self, flat: Tensor, c_type: str) -> str:
        """The name of the run-time data array holding ``flat``'s numbers (the same numbers: one array)."""
        for name, known_type, values, _ in self.data:
            if known_type == c_type and values.numel() == flat.numel() and torch.equal(values, flat):
                return name
        name = self._name("c")
        self.data.append((name, c_type, flat, self.data_bytes))
        self.data_bytes += (flat.numel() * flat.element_size() + ALIGN - 1) // ALIGN * ALIGN
        return name

    def _data_blob(self) -> Tensor | None:
        """The run-time data as one byte blob at the offsets the source reads them from."""
        if not self.data:
            return None
        blob = torch.zeros(self.data_bytes, dtype=torch.uint8)
        for _, _, values, offset in self.data:
            raw = values.contiguous().view(torch.uint8)
            blob[offset:offset + raw.numel()] = raw
        return blob

    def _allocate(self, t: Tensor) -> Tensor:
        """A fresh contiguous copy of ``t`` (an operation's eager result) with a workspace buffer of its own."""
        fresh = torch.empty(t.shape, dtype=t.dtype)
        fresh.copy_(t)
        c_type = _c_type(t.dtype)
        size = max(fresh.numel(), 1) * fresh.element_size()
        size = (size + ALIGN - 1) // ALIGN * ALIGN
        self.allocated_bytes += size
        if self.free.get(size):
            offset = self.free[size].pop()
        else:
            offset, self.work_bytes = self.work_bytes, self.work_bytes + size
        name = self._name("b")
        self.offsets[name] = (offset, size)
        self.addresses[name] = (c_type, offset)
        self.body.append(f"{c_type} *restrict {name} = ({c_type} *)(w + {offset});")
        key = self._storage_key(fresh)
        self.buffers[key] = _Buffer(name, c_type, fresh.numel())
        self.storages[key] = fresh.untyped_storage()
        return fresh

    def _release(self, key: int) -> None:
        buffer = self.buffers.get(key)
        if buffer is None or buffer.name not in self.offsets:  # constants and u have no workspace
            return
        offset, size = self.offsets.pop(buffer.name)
        self.free.setdefault(size, []).append(offset)

    def _buffer(self, t: Tensor) -> _Buffer:
        key = self._storage_key(t)
        if key not in self.buffers:
            raise Unsupported("a tensor without a known buffer (an operation this writer does not track)")
        buffer = self.buffers[key]
        if buffer.c_type != _c_type(t.dtype):
            raise Unsupported("a view that reinterprets a tensor's dtype")
        return buffer

    def bounds_check(self, t: Tensor, size: int, negative: bool) -> int | None:
        """The number of a new bounds check of index ``t`` against ``size`` (codegen's _position), or None where
        none is needed: ``t`` is data (its values were checked when the graph was interpreted, and are the same
        at every point) or was checked against the same bound already."""
        if not isinstance(t, Tensor) or self._buffer(t).constant:
            return None
        key = (self._storage_key(t), t.storage_offset(), tuple(t.shape), tuple(t.stride()), size, negative)
        if key in self.checked:
            return None
        self.checked[key] = len(self.checks)
        self.checks.append(self.target)
        return self.checked[key]

    # -- element access and loops -----------------------------------------------------------------------------
    def read(self, t, shape: tuple[int, ...], index: list[str], c_type: str | None = None) -> str:
        """The C expression of ``t``'s element at ``index`` (loop variables over ``shape``, t broadcast to it);
        a Python number is a literal."""
        if not isinstance(t, Tensor):
            return _literal(t, c_type or self.real)
        buffer = self._buffer(t)
        lead = len(shape) - t.dim()
        terms = [str(t.storage_offset())] if t.storage_offset() else []
        for d in range(t.dim()):
            if t.shape[d] != 1 and t.stride(d) != 0:
                terms.append(f"{index[lead + d]}*{t.stride(d)}" if t.stride(d) != 1 else index[lead + d])
        return f"{buffer.name}[{' + '.join(terms) or '0'}]"

    def loops(self, shape: tuple[int, ...], statement, simd: bool = False) -> None:
        """Nested loops over ``shape`` around ``statement(index)`` (index: the loop variables' names); ``simd``: the
        innermost loop's iterations are independent (``omp simd``: vectorized, math functions through their SIMD
        variants where the header declares them)."""
        index = [self._name("i") for _ in shape]
        lines = []
        for depth, (var, size) in enumerate(zip(index, shape)):
            if simd and depth == len(shape) - 1 and size >= SIMD_MIN:
                lines.append("#pragma omp simd")
            lines.append("  " * depth + f"for (int64_t {var} = 0; {var} < {size}; {var}++)")
        lines.append("  " * len(shape) + statement(index))
        opening = "{\n" if lines[0].startswith("#") else "{ "  # a pragma starts a line of its own
        self.body.append(opening + "\n".join(lines) + " }" if shape else "{ " + statement(index) + " }")

    @staticmethod
    def flat(shape: tuple[int, ...], index: list[str], strides: tuple[int, ...] | None = None,
             offset: int = 0) -> str:
        """The position of ``index`` in a buffer of ``shape`` laid out with ``strides`` (contiguous: None)."""
        if strides is None:
            strides = _contiguous_strides(shape)
        terms = [str(offset)] if offset else []
        terms += [f"{v}*{s}" if s != 1 else v for v, n, s in zip(index, shape, strides) if n != 1 and s != 0]
        return " + ".join(terms) or "0"

    def elementwise(self, out: Tensor, inputs: list, expression, cast: bool = True) -> None:
        """out[i] = expression(inputs' elements at i), inputs broadcast to out's shape; floating outputs read
        every input as their own type (so that integer division is real division)."""
        buffer = self._buffer(out)
        shape = tuple(out.shape)
        c_type = buffer.c_type
        floating = c_type in ("double", "float")

        operand = c_type if floating else _operand_type(inputs)

        def statement(index):
            values = []
            for t in inputs:
                text = self.read(t, shape, index, operand)
                if cast and floating and isinstance(t, Tensor) and _c_type(t.dtype) != c_type:
                    text = f"(({c_type}){text})"
                values.append(text)
            return f"{buffer.name}[{self.flat(shape, index)}] = {expression(*values)};"

        self.loops(shape, statement, simd=True)  # out is a fresh buffer: no iteration reads another's result

    def copy_region(self, out: Tensor, source, shape: tuple[int, ...], strides: tuple[int, ...], offset: int,
                    accumulate: bool = False) -> None:
        """out's elements at offset + index . strides (index over ``shape``) = (or +=) source broadcast to shape."""
        buffer = self._buffer(out)
        sign = "+=" if accumulate else "="
        self.loops(shape, lambda index: f"{buffer.name}[{self.flat(shape, index, strides, offset)}] {sign} "
                                        f"{self.read(source, shape, index, buffer.c_type)};")

    # -- the pass -------------------------------------------------------------------------------------------
    def run(self) -> Generated:
        nodes = list(self.graph.graph.nodes)
        position_of = {node: i for i, node in enumerate(nodes)}
        self.last_reader = {node: max((position_of[u] for u in node.users), default=i) for i, node in enumerate(nodes)}
        output_node = None
        for position, node in enumerate(nodes):
            self.position = position
            start = len(self.body)
            if node.op == "placeholder":
                point = torch.zeros(self.dim, dtype=self.dtype)
                key = self._storage_key(point)
                self.buffers[key] = _Buffer("u", self.real, self.dim)
                self.storages[key] = point.untyped_storage()
                self.env[node] = point
                self.dynamic.add(node)
            elif node.op == "get_attr":
                value = getattr(self.graph, node.target)
                if isinstance(value, Tensor):
                    value = value.detach()
                    self._constant(value)
                self.env[node] = value
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                output_node = node
            else:
                raise Unsupported(f"graph node of kind {node.op}")
            self.segments.append(self.body[start:])
            for key in self.expiring.pop(position, ()):
                if self.lifetimes.get(key) == position:
                    self._release(key)
                    del self.lifetimes[key]
        return self._finish(output_node)

    def _live_until(self, key: int, last: int) -> None:
        """The workspace storage ``key`` is released after position ``last`` (or later, where it already lives
        longer); a lifetime that ended before the current position ends with it."""
        last = max(self.lifetimes.get(key, -1), last, self.position)
        self.lifetimes[key] = last
        self.expiring.setdefault(last, []).append(key)

    def _note_lifetime(self, node: torch.fx.Node) -> None:
        """The buffer under ``node``'s value lives at least until the node's last reader."""
        value = self.env.get(node)
        if isinstance(value, Tensor):
            key = self._storage_key(value)
            if key in self.buffers and not self.buffers[key].constant:
                self._live_until(key, self.last_reader[node])

    def _call(self, node: torch.fx.Node) -> None:
        args = torch.fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.env.__getitem__)
        target = node.target
        dynamic = any(n in self.dynamic for n in node.all_input_nodes)
        if target is operator.getitem:  # one tensor of a multi-output view (unbind, split): a view, no code
            base, index = args
            if not isinstance(base, tuple) or not isinstance(index, int):
                raise Unsupported("an operation with several outputs")
            self.env[node] = base[index]
            if dynamic:
                self.dynamic.add(node)
                self._note_lifetime(node)  # the view keeps its base's buffer alive until its last reader
            return
        schema = getattr(target, "_schema", None)
        mutable = schema is not None and schema.is_mutable
        if target in DATA_IN_PLACE or (mutable and _functional(target) in HANDLERS):
            self._in_place(node, target, args, kwargs)
            return
        if mutable and target not in METADATA_IN_PLACE:
            raise Unsupported(f"no C for the in-place operator {target}")
        if not dynamic or target in VALUE_FREE:
            value = target(*args, **kwargs)
            if target in VIEWS and _all_tensors(value):  # a constant's pieces (unbind, split)
                for piece in value:
                    self._constant(piece)
                self.env[node] = tuple(value)
                return
            if not isinstance(value, Tensor):
                raise Unsupported(f"no C for the operator {target} (it returns {type(value).__name__})")
            self._constant(value)
            self.env[node] = value
            return
        self.dynamic.add(node)
        if target not in HANDLERS and target not in VIEWS and target not in METADATA_IN_PLACE:
            raise Unsupported(f"no C for the operator {target}")
        if target in RESHAPES:
            args = self._viewable(target, args, kwargs)
        value = target(*args, **kwargs)
        shared = {self._storage_key(t) for t in _tensors(args) | _tensors(kwargs)}
        if target in VIEWS and _all_tensors(value) and all(self._storage_key(t) in shared for t in value):
            self.env[node] = tuple(value)  # views of the input, one per piece: read through by operator.getitem
            return
        if not isinstance(value, Tensor):
            raise Unsupported(f"no C for the operator {target} (it returns {type(value).__name__})")
        if self._storage_key(value) in shared:  # a view: no code, read through its strides
            if target not in VIEWS and target not in METADATA_IN_PLACE:
                raise Unsupported(f"{target} returned its input's storage")
            self.env[node] = value
            self._note_lifetime(node)  # a view keeps its base alive until the view's last reader
            return
        handler = HANDLERS.get(target)
        if handler is None:
            raise Unsupported(f"no C for the operator {target}")
        self.target = str(target)
        if _computed_once(node, target, value, args, kwargs):
            args, kwargs = _first_elements(args), _first_elements(kwargs)
            out = self._allocate(target(*args, **kwargs))
            self.env[node] = out.expand(value.shape)  # read through stride 0 by every later reader
            self._note_lifetime(node)
            self.operations += 1
            handler(self, out, *args, **kwargs)
            return
        out = self._allocate(value)
        self.env[node] = out
        self._note_lifetime(node)
        self.operations += 1
        handler(self, out, *args, **kwargs)

    def _viewable(self, target, args, kwargs) -> tuple:
        """``args`` of a view or reshape, its input copied into a contiguous buffer of its own where the input's
        buffer cannot be viewed in the traced shape: every result here is laid out contiguously, where eager
        results may not be (an elementwise result of a transposed input keeps its strides, so the trace's view of
        its transpose is valid there and not here)."""
        try:
            target(*args, **kwargs)
            return args
        except RuntimeError:
            pass
        copy = self._allocate(args[0].contiguous())
        self.operations += 1
        _copy_like(self, copy, args[0])
        return (copy, *args[1:])

    def _in_place(self, node: torch.fx.Node, target, args, kwargs) -> None:
        """An operator that writes into its first argument (``copy_``, ``fill_``, ``zero_``): the code writes into
        that argument's buffer through its strides, and the eager value changes the same way, so every later
        reader (of this node or of the argument's) reads what it would in eager order."""
        destination = args[0]
        buffer = self._buffer(destination)
        if buffer.constant or buffer.name == "u":
            raise Unsupported(f"{target} writes into the data or the parameters")
        written = self._storage_key(destination)  # an index checked before holds other numbers now
        self.checked = {key: check for key, check in self.checked.items() if key[0] != written}
        self.target = str(target)
        self.dynamic.add(node)
        if target in DATA_IN_PLACE:
            source = {aten.copy_.default: lambda: args[1], aten.fill_.Scalar: lambda: args[1],
                      aten.fill_.Tensor: lambda: args[1], aten.zero_.default: lambda: 0}[target]()
        else:  # x.op_(y): the functional op into a buffer of its own, then copied into x
            functional = _functional(target)
            source = self._allocate(functional(*args, **kwargs))
            HANDLERS[functional](self, source, *args, **kwargs)
            self._live_until(self._storage_key(source), self.position)
        value = target(*args, **kwargs)
        shape = tuple(destination.shape)
        self.loops(shape, lambda index: f"{buffer.name}[{self.flat(shape, index, destination.stride(), destination.storage_offset())}]"
                                        f" = ({buffer.c_type})({self.read(source, shape, index, buffer.c_type)});")
        self.operations += 1
        self.env[node] = value
        self._note_lifetime(node)

    def _finish(self, output_node) -> Generated:
        values = torch.fx.node.map_arg(output_node.args[0], self.env.__getitem__)
        if not (isinstance(values, (tuple, list)) and len(values) == 2):
            raise Unsupported("the graph does not return (log pi, grad)")
        log_prob, grad = values
        if not (isinstance(log_prob, Tensor) and log_prob.numel() == 1 and isinstance(grad, Tensor)
                and tuple(grad.shape) == (self.dim,)):
            raise Unsupported("the graph's outputs are not a scalar and a (dim,) gradient")
        index = ["j"]
        tail = [f"for (int64_t j = 0; j < {self.dim}; j++) g[j] = ({self.real}){self.read(grad, (self.dim,), index)};",
                f"*lp = ({self.real}){self.read(log_prob.reshape(()), (), [])};", "return 0;"]
        header = ["#include <stdint.h>", "#include <stddef.h>", "#include <tgmath.h>", "",
                  "#ifndef NAN", "#define NAN (0.0 / 0.0)", "#endif", "", *([self.simd_math, ""] if self.simd_math else []),
                  DIGAMMA, "", TRIGAMMA, "", FAIL, ""]
        work = max(self.work_bytes, ALIGN)
        names = ", ".join('"' + name.replace('"', "") + '"' for name in self.checks) or '""'
        body, tables, folded = self.body, [], None
        if self.fold_loops:
            types = {buffer.name: buffer.c_type for buffer in self.buffers.values()}
            external = frozenset(name for name, *_ in self.data)
            body, tables, folded = loops.fold(self.segments, self.addresses, types, external)
        data = [f"const {c_type} *restrict {name} = (const {c_type} *)(data + {offset});"
                for name, c_type, _, offset in self.data]
        code = "\n".join([*header, *self.constants, *tables, "",
                          f"const size_t bayesx_density_work = {work};",
                          f"const size_t bayesx_density_data_bytes = {self.data_bytes};",
                          f"static const char *const bx_checks[] = {{{names}}};",
                          "const char *bayesx_density_check(int64_t check) {",
                          f"    return check >= 0 && check < {len(self.checks)} ? bx_checks[check] : \"\";", "}", "",
                          f"int bayesx_density(const {self.real} *restrict u, {self.real} *restrict g, "
                          f"{self.real} *restrict lp, void *restrict work, int64_t *restrict fault, "
                          f"const char *restrict data) {{",
                          "char *restrict w = (char *)work;", *data, *body, *tail, "}", ""])
        return Generated(code, work, self.operations, self.allocated_bytes, list(self.checks), folded,
                         self._data_blob())


def _functional(target):
    """The out-of-place overload of an in-place operator (aten.mul_.Tensor -> aten.mul.Tensor), else None."""
    packet = getattr(target, "overloadpacket", None)
    name = getattr(packet, "__name__", "")
    if not name.endswith("_") or name.endswith("__"):
        return None
    functional = getattr(aten, name[:-1], None)
    return getattr(functional, target._overloadname, None) if functional is not None else None


def _uniform(t: Tensor) -> bool:
    """Every element of ``t`` is one number in memory: each dimension has size 1 or stride 0 (a broadcast scalar,
    as ``torch.distributions`` expands a scale to the data's shape)."""
    return all(n == 1 or s == 0 for n, s in zip(t.shape, t.stride()))


def _computed_once(node: torch.fx.Node, target, value: Tensor, args, kwargs) -> bool:
    """Whether a pointwise operation reads only broadcast scalars (:func:`_uniform`), so that its one number is
    computed once instead of at each of its elements: ``log(scale)`` over 3,070 rows of a hierarchical model was
    3,070 logarithms. Not where a later operation writes into its result in place (an expanded tensor has one
    element for all its positions)."""
    if value.numel() <= 1 or torch.Tag.pointwise not in getattr(target, "tags", ()):
        return False
    if not all(_uniform(t) for t in _tensors(args) | _tensors(kwargs)):
        return False
    return not any(getattr(getattr(user.target, "_schema", None), "is_mutable", False) for user in node.users)


def _first_elements(value):
    """``value`` with each tensor cut to its first element along every dimension (its rank kept: a view)."""
    if isinstance(value, Tensor):
        return value[tuple(slice(0, 1) for _ in range(value.dim()))] if value.dim() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_first_elements(v) for v in value)
    if isinstance(value, dict):
        return {k: _first_elements(v) for k, v in value.items()}
    return value


def _all_tensors(value) -> bool:
    """Whether ``value`` is a multi-output operator's tuple or list of tensors (unbind's, split's)."""
    return isinstance(value, (tuple, list)) and len(value) > 0 and all(isinstance(t, Tensor) for t in value)


def _tensors(value) -> set:
    found = set()
    if isinstance(value, Tensor):
        found.add(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            found |= _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            found |= _tensors(v)
    return found


def _operand_type(inputs) -> str:
    """The C type a comparison's (or an integer result's) scalar operands are written in: the first floating
    tensor's, else double where a scalar is fractional, else int64_t."""
    for t in inputs:
        if isinstance(t, Tensor) and t.dtype.is_floating_point:
            return C_TYPES[t.dtype]
    if any(isinstance(t, float) for t in inputs):
        return "double"
    return "int64_t"


def _contiguous_strides(shape) -> tuple[int, ...]:
    strides, running = [], 1
    for n in reversed(shape):
        strides.append(running)
        running *= max(n, 1)
    return tuple(reversed(strides))


def _dims(dims, rank: int) -> list[int]:
    if rank == 0:  # a 0-d tensor: dim 0 or -1 is the tensor itself, and there is nothing to reduce
        return []
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    if isinstance(dims, int):
        dims = [dims]
    return sorted({d % max(rank, 1) for d in dims})


# -- operators --------------------------------------------------------------------------------------------------
def _unary(template: str):
    def handler(w: _Writer, out, x, *rest, **kwargs):
        w.elementwise(out, [x], lambda a: template.format(a=a, t=w._buffer(out).c_type))
    return handler


def _binary(template: str):
    def handler(w: _Writer, out, x, y, **kwargs):
        w.elementwise(out, [x, y], lambda a, b: template.format(a=a, b=b))
    return handler


def _comparison(symbol: str):
    def handler(w: _Writer, out, x, y):
        w.elementwise(out, [x, y], lambda a, b: f"({a} {symbol} {b})", cast=False)
    return handler


def _add(w, out, x, y, alpha=1):
    w.elementwise(out, [x, y, alpha], lambda a, b, s: f"({a} + {s} * {b})" if alpha != 1 else f"({a} + {b})")


def _sub(w, out, x, y, alpha=1):
    w.elementwise(out, [x, y, alpha], lambda a, b, s: f"({a} - {s} * {b})" if alpha != 1 else f"({a} - {b})")


def _div(w, out, x, y, rounding_mode=None):
    if rounding_mode is None:
        w.elementwise(out, [x, y], lambda a, b: f"({a} / {b})")
    elif rounding_mode == "trunc":
        w.elementwise(out, [x, y], lambda a, b: f"trunc({a} / {b})")
    elif rounding_mode == "floor":
        w.elementwise(out, [x, y], lambda a, b: f"floor({a} / {b})")
    else:
        raise Unsupported(f"division with rounding_mode={rounding_mode}")


def _pow_scalar(w, out, x, exponent):
    t = w._buffer(out).c_type
    if exponent == 1:
        w.elementwise(out, [x], lambda a: f"({a})")
    elif exponent == 2:
        w.elementwise(out, [x], lambda a: f"({a} * {a})")
    elif exponent == 3:
        w.elementwise(out, [x], lambda a: f"({a} * {a} * {a})")
    elif exponent == 0.5:
        w.elementwise(out, [x], lambda a: f"sqrt({a})")
    elif exponent == -1:
        w.elementwise(out, [x], lambda a: f"(({t})1 / {a})")
    elif exponent == -2:
        w.elementwise(out, [x], lambda a: f"(({t})1 / ({a} * {a}))")
    elif exponent == 0:
        w.elementwise(out, [x], lambda a: f"(({t})1)")
    else:
        w.elementwise(out, [x, exponent], lambda a, e: f"pow({a}, {e})")


def _pow_tensor(w, out, x, y):
    w.elementwise(out, [x, y], lambda a, b: f"pow({a}, {b})")


def _pow_base(w, out, base, y):
    w.elementwise(out, [base, y], lambda a, b: f"pow({a}, {b})")


def _where(w, out, condition, x, y):
    c_type = w._buffer(out).c_type
    w.elementwise(out, [condition, x, y], lambda c, a, b: f"({c} ? ({c_type})({a}) : ({c_type})({b}))", cast=False)


def _clamp(w, out, x, low=None, high=None):
    def expression(a, *bounds):
        text = a
        bounds = list(bounds)
        if low is not None:
            lo = bounds.pop(0)
            text = f"({text} < {lo} ? {lo} : {text})"
        if high is not None:
            hi = bounds.pop(0)
            text = f"({text} > {hi} ? {hi} : {text})"
        return text
    w.elementwise(out, [x, *(b for b in (low, high) if b is not None)], expression)


def _clamp_min(w, out, x, low):
    _clamp(w, out, x, low, None)


def _clamp_max(w, out, x, high):
    _clamp(w, out, x, None, high)


def _convert(w: _Writer, out, source) -> None:
    """out = source (broadcast to out's shape), each element converted to out's C type by C's cast. A double
    narrowed to float is stored through a volatile float: GCC 12 at -O2 with AVX (-march=native) lets its SLP
    vectorizer drop a double -> float -> double round trip through a buffer, so that the float buffer read back
    gave the unrounded double (``x.float().double()`` off by 1e-7; tests/test_codegen_ops.py)."""
    c_type = w._buffer(out).c_type
    if not (c_type == "float" and isinstance(source, Tensor) and source.dtype == torch.float64):
        w.elementwise(out, [source], lambda a: f"({c_type})({a})", cast=False)
        return
    buffer, shape = w._buffer(out), tuple(out.shape)
    w.loops(shape, lambda index: f"{{ volatile float v = (float)({w.read(source, shape, index)}); "
                                 f"{buffer.name}[{w.flat(shape, index)}] = v; }}")


def _copy_like(w, out, x, *rest, **kwargs):
    """clone, _to_copy (a dtype conversion): the element, converted (_convert)."""
    _convert(w, out, x)


def _reduce(kind: str):
    def handler(w: _Writer, out, x, dims=None, keepdim=False, *, dtype=None):
        buffer = w._buffer(out)
        reduced = set(_dims(dims, x.dim()))
        out_shape = tuple(1 if d in reduced else n for d, n in enumerate(x.shape))
        out_strides = _contiguous_strides(out_shape)
        strides = tuple(0 if d in reduced else s for d, s in enumerate(out_strides))
        t = buffer.c_type
        start = {"sum": "0", "prod": "1", "amax": "(-INFINITY)", "amin": "INFINITY", "mean": "0"}[kind]
        if kind in ("amax", "amin") and t not in ("double", "float"):
            raise Unsupported(f"{kind} of an integer tensor")
        w.body.append(f"for (int64_t i = 0; i < {max(out.numel(), 1)}; i++) {buffer.name}[i] = {start};")
        shape = tuple(x.shape)

        def statement(index):
            target = f"{buffer.name}[{w.flat(shape, index, strides)}]"
            value = w.read(x, shape, index, t)
            if kind in ("sum", "mean"):
                return f"{target} += {value};"
            if kind == "prod":
                return f"{target} *= {value};"
            better = ">" if kind == "amax" else "<"
            return f"{{ {t} v = {value}; if (v {better} {target} || v != v) {target} = v; }}"

        w.loops(shape, statement)
        if kind == "mean":
            count = math.prod(x.shape[d] for d in reduced) if reduced else 1
            w.body.append(f"for (int64_t i = 0; i < {max(out.numel(), 1)}; i++) {buffer.name}[i] /= {count};")
    return handler


def _reduce_all(kind: str):
    def handler(w, out, x):
        _reduce(kind)(w, out, x, None)
    return handler


def _prod_dim(w, out, x, dim, keepdim=False, *, dtype=None):
    _reduce("prod")(w, out, x, [dim], keepdim)


def _cumulative(kind: str):
    def handler(w: _Writer, out, x, dim, *, dtype=None):
        buffer = w._buffer(out)
        dim = dim % max(x.dim(), 1)
        if x.dim() == 0:
            w.elementwise(out, [x], lambda a: a)
            return
        outer = tuple(n for d, n in enumerate(x.shape) if d != dim)
        strides = _contiguous_strides(tuple(x.shape))
        outer_strides = tuple(s for d, s in enumerate(strides) if d != dim)
        n, step = x.shape[dim], strides[dim]
        symbol = "+" if kind == "sum" else "*"
        start = "0" if kind == "sum" else "1"

        def statement(index):
            full = list(index)
            full.insert(dim, "k")
            base = w.flat(outer, index, outer_strides)
            value = w.read(x, tuple(x.shape), full, buffer.c_type)
            return (f"{{ {buffer.c_type} acc = {start}; for (int64_t k = 0; k < {n}; k++) "
                    f"{{ acc = acc {symbol} {value}; {buffer.name}[{base} + k*{step}] = acc; }} }}")

        w.loops(outer, statement)
    return handler


def _mm(w: _Writer, out, a, b):
    """out (n, m) = a (n, k) b (k, m), the loop over the index whose operands lie closest together in memory
    innermost (a design matrix X and its transpose X^T in a gradient read one with rows, the other with columns
    contiguous): k innermost sums into a register, i or j innermost updates a row or column of out, zeroed first."""
    buffer = w._buffer(out)
    n, k = a.shape
    m = b.shape[1]
    t = buffer.c_type
    spread = {"k": abs(a.stride(1)) + abs(b.stride(0)) if k > 1 else math.inf,  # a loop of one is never inner
              "j": 1 + abs(b.stride(1)) if m > 1 else math.inf,
              "i": m + abs(a.stride(0)) if n > 1 else math.inf}
    inner = min(("k", "j", "i"), key=lambda v: spread[v])
    if inner == "k":  # the sum vectorized in partial sums (omp simd: reassociated, as BLAS does)
        w.loops((n, m), lambda index: (
            f"{{ {t} acc = 0;\n#pragma omp simd reduction(+:acc)\nfor (int64_t k = 0; k < {k}; k++) acc += "
            f"{w.read(a, (n, k), [index[0], 'k'], t)} * {w.read(b, (k, m), ['k', index[1]], t)}; "
            f"{buffer.name}[{index[0]}*{m} + {index[1]}] = acc; }}"))
        return
    w.body.append(f"for (int64_t i = 0; i < {max(n * m, 1)}; i++) {buffer.name}[i] = 0;")
    outer, (var, size) = (("i", n), ("j", m)) if inner == "j" else (("j", m), ("i", n))
    for_outer = f"for (int64_t {outer[0]} = 0; {outer[0]} < {outer[1]}; {outer[0]}++)"
    a_read, b_read = w.read(a, (n, k), ["i", "k"], t), w.read(b, (k, m), ["k", "j"], t)
    scale = a_read if inner == "j" else b_read  # fixed in the inner loop
    moving = b_read if inner == "j" else a_read
    w.body.append(f"for (int64_t k = 0; k < {k}; k++) {for_outer} {{ const {t} s = {scale};\n#pragma omp simd\n"
                  f"for (int64_t {var} = 0; {var} < {size}; {var}++) {buffer.name}[i*{m} + j] += s * {moving}; }}")


def _bmm(w: _Writer, out, a, b):
    buffer = w._buffer(out)
    batch, n, k = a.shape
    m = b.shape[2]
    t = buffer.c_type
    w.loops((batch, n, m), lambda index: (
        f"{{ {t} acc = 0; for (int64_t k = 0; k < {k}; k++) acc += "
        f"{w.read(a, (batch, n, k), [index[0], index[1], 'k'], t)} * "
        f"{w.read(b, (batch, k, m), [index[0], 'k', index[2]], t)}; "
        f"{buffer.name}[{index[0]}*{n * m} + {index[1]}*{m} + {index[2]}] = acc; }}"))


def _addmm(w: _Writer, out, bias, a, b, *, beta=1, alpha=1):
    _mm(w, out, a, b)
    buffer = w._buffer(out)
    shape = tuple(out.shape)
    w.loops(shape, lambda index: (f"{buffer.name}[{w.flat(shape, index)}] = {_literal(alpha, buffer.c_type)} * "
                                  f"{buffer.name}[{w.flat(shape, index)}] + {_literal(beta, buffer.c_type)} * "
                                  f"{w.read(bias, shape, index, buffer.c_type)};"))


def _cat(w: _Writer, out, tensors, dim=0):
    shape = tuple(out.shape)
    dim = dim % len(shape)
    strides = _contiguous_strides(shape)
    start = 0
    for t in tensors:
        if t.numel() == 0 and t.dim() == 1:  # torch skips empty 1-d tensors in cat
            continue
        w.copy_region(out, t, tuple(t.shape), strides, start * strides[dim])
        start += t.shape[dim]


def _constant_pad(w: _Writer, out, x, pad, value=0):
    buffer = w._buffer(out)
    w.body.append(f"for (int64_t i = 0; i < {max(out.numel(), 1)}; i++) {buffer.name}[i] = "
                  f"{_literal(value, buffer.c_type)};")
    shape = list(x.shape)
    offset = x.storage_offset()
    out_strides = _contiguous_strides(tuple(out.shape))
    target = 0
    view_shape, view_strides = list(x.shape), list(x.stride())
    for i in range(len(pad) // 2):
        d = x.dim() - 1 - i
        before = pad[2 * i]
        first = max(0, -before)
        last = min(shape[d], out.shape[d] - before)
        if last <= first:
            return
        offset += first * x.stride(d)
        view_shape[d] = last - first
        target += (first + before) * out_strides[d]
    cropped = x.as_strided(view_shape, view_strides, offset)
    w.copy_region(out, cropped, tuple(view_shape), out_strides, target)


def _normalized_slice(size: int, start, end, step) -> tuple[int, int, int]:
    start = 0 if start is None else start
    end = size if end is None else end
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    return start, max(end, start), step


def _slice_scatter(w: _Writer, out, base, source, dim=0, start=None, end=None, step=1):
    w.elementwise(out, [base], lambda a: a, cast=False)
    dim = dim % base.dim()
    strides = list(_contiguous_strides(tuple(out.shape)))
    start, end, step = _normalized_slice(base.shape[dim], start, end, step)
    offset = start * strides[dim]
    strides[dim] *= step
    w.copy_region(out, source, tuple(source.shape), tuple(strides), offset)


def _diagonal_scatter(w: _Writer, out, base, source, offset=0, dim1=0, dim2=1):
    """base with its (offset) diagonal over dims dim1, dim2 replaced by source (the other dims, then the diagonal):
    the diagonal is a region whose last stride is the sum of the two dims' strides (autograd's inverse of
    ``torch.diagonal``, e.g. a Cholesky factor's log-determinant)."""
    w.elementwise(out, [base], lambda a: a, cast=False)
    dim1, dim2 = dim1 % base.dim(), dim2 % base.dim()
    strides = list(_contiguous_strides(tuple(out.shape)))
    start = max(-offset, 0) * strides[dim1] + max(offset, 0) * strides[dim2]
    diagonal = strides[dim1] + strides[dim2]
    rest = [st for d, st in enumerate(strides) if d not in (dim1, dim2)]
    w.copy_region(out, source, tuple(source.shape), (*rest, diagonal), start)


def _indexed_layout(w: _Writer, x: Tensor, indices) -> tuple[int, list[Tensor], tuple[int, ...]]:
    """Where advanced indices sit in x (first indexed dim, the index tensors) and their broadcast shape;
    only consecutive indexed dimensions (torch's other case moves them first)."""
    positions = [d for d, i in enumerate(indices) if i is not None]
    if not positions or positions != list(range(positions[0], positions[-1] + 1)):
        raise Unsupported("advanced indexing of non-consecutive dimensions")
    tensors = [indices[d] for d in positions]
    for t in tensors:
        if t.dtype in (torch.bool, torch.uint8):
            raise Unsupported("indexing by a boolean mask of the parameters")
    shape = tuple(torch.broadcast_shapes(*(t.shape for t in tensors)))
    return positions[0], tensors, shape


def _position(w: _Writer, t: Tensor, shape: tuple[int, ...], index: list[str], size: int, dim: int,
              negative: bool) -> tuple[str, str]:
    """(C that declares a variable holding ``t``'s element at ``index`` as a position along a dimension of
    ``size``, the variable's name). Where ``t`` depends on the parameters the C also checks it, as PyTorch
    does, and fails the evaluation with the index (BX_FAIL, the generated function's status) where it is out of
    bounds: reading past a table gives a number where PyTorch raises. ``negative``: the operator counts from the
    end for negative positions (advanced indexing, index_put), where the others (index_select, gather,
    scatter_add, index_add) raise. An index whose values were checked against the same size already is not
    checked again (the gradient's index_put after the forward index)."""
    name = w._name("x")
    lines = [f"int64_t {name} = (int64_t)({w.read(t, shape, index, 'int64_t')});"]
    check = w.bounds_check(t, size, negative)
    if check is not None:
        low = -size if negative else 0
        lines.append(f"if ({name} < {low} || {name} >= {size}) BX_FAIL({check}, {name}, {size}, {dim});")
    if negative:
        lines.append(f"if ({name} < 0) {name} += {size};")
    return " ".join(lines), name


def _indexed_offset(w: _Writer, x: Tensor, first: int, tensors, index_shape, index,
                    negative: bool = True) -> tuple[str, str]:
    """(C declaring and checking the advanced indices, the position in x's buffer of the indexed element at
    ``index``: loop variables over the result's shape)."""
    nb = len(index_shape)
    terms = [str(x.storage_offset())] if x.storage_offset() else []
    for d in range(first):
        terms.append(f"{index[d]}*{x.stride(d)}")
    b_index = index[first:first + nb]
    prelude = []
    for j, t in enumerate(tensors):
        d = first + j
        declared, name = _position(w, t, index_shape, b_index, x.shape[d], d, negative)
        prelude.append(declared)
        terms.append(f"{name}*{x.stride(d)}")
    for k, d in enumerate(range(first + len(tensors), x.dim())):
        terms.append(f"{index[first + nb + k]}*{x.stride(d)}")
    return " ".join(prelude), " + ".join(terms) or "0"


def _index(w: _Writer, out, x, indices, negative: bool = True):
    indices = list(indices) + [None] * (x.dim() - len(indices))
    first, tensors, index_shape = _indexed_layout(w, x, indices)
    shape = tuple(out.shape)
    buffer, source = w._buffer(out), w._buffer(x)

    def statement(index):
        prelude, offset = _indexed_offset(w, x, first, tensors, index_shape, index, negative)
        return f"{{ {prelude} {buffer.name}[{w.flat(shape, index)}] = {source.name}[{offset}]; }}"

    w.loops(shape, statement)


def _index_put(w: _Writer, out, x, indices, values, accumulate=False):
    w.elementwise(out, [x], lambda a: a, cast=False)
    indices = list(indices) + [None] * (x.dim() - len(indices))
    first, tensors, index_shape = _indexed_layout(w, x, indices)
    shape = tuple(x.shape[:first]) + index_shape + tuple(x.shape[first + len(tensors):])
    buffer = w._buffer(out)  # without accumulate, duplicate indices: the last write in order wins
    contiguous = out  # out is contiguous, its strides those of its buffer
    sign = "+=" if accumulate else "="

    def statement(index):
        prelude, offset = _indexed_offset(w, contiguous, first, tensors, index_shape, index)
        return f"{{ {prelude} {buffer.name}[{offset}] {sign} {w.read(values, shape, index, buffer.c_type)}; }}"

    w.loops(shape, statement)


def _index_select(w: _Writer, out, x, dim, index):
    if x.dim() == 0:  # a 0-d tensor selects as one of a single element
        x, out, index = x.reshape(1), out.reshape(-1), index.reshape(-1)
    dim = dim % max(x.dim(), 1)
    _index(w, out, x, [None] * dim + [index], negative=False)


def _embedding(w: _Writer, out, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """embedding(weight, indices) = weight[indices] (rows; a negative index raises, as in PyTorch)."""
    _index(w, out, weight, [indices], negative=False)


def _gather(w: _Writer, out, x, dim, index, sparse_grad=False):
    if x.dim() == 0:  # a 0-d tensor gathers as one of a single element
        x, out, index = x.reshape(1), out.reshape(-1), index.reshape(-1)
    dim = dim % max(x.dim(), 1)
    buffer, source = w._buffer(out), w._buffer(x)
    shape = tuple(index.shape)

    def statement(idx):
        prelude, position = _position(w, index, shape, idx, x.shape[dim], dim, negative=False)
        terms = [str(x.storage_offset())] if x.storage_offset() else []
        for d in range(x.dim()):
            terms.append(f"{position if d == dim else idx[d]}*{x.stride(d)}")
        return f"{{ {prelude} {buffer.name}[{w.flat(shape, idx)}] = {source.name}[{' + '.join(terms)}]; }}"

    w.loops(shape, statement)


def _scatter_add(w: _Writer, out, x, dim, index, source):
    if x.dim() == 0:  # a 0-d tensor scatters as one of a single element
        x, out, index, source = x.reshape(1), out.reshape(1), index.reshape(-1), source.reshape(-1)
    w.elementwise(out, [x], lambda a: a, cast=False)
    dim = dim % max(x.dim(), 1)
    buffer = w._buffer(out)
    shape = tuple(index.shape)
    strides = _contiguous_strides(tuple(out.shape))

    def statement(idx):
        prelude, position = _position(w, index, shape, idx, out.shape[dim], dim, negative=False)
        terms = [f"{position if d == dim else idx[d]}*{strides[d]}" for d in range(out.dim())]
        s = source.as_strided(shape, source.stride(), source.storage_offset())
        return f"{{ {prelude} {buffer.name}[{' + '.join(terms)}] += {w.read(s, shape, idx, buffer.c_type)}; }}"

    w.loops(shape, statement)


def _polygamma(w: _Writer, out, n, x):
    if n not in (0, 1):
        raise Unsupported(f"polygamma of order {n} (orders 0 and 1 only)")
    function = "bx_digamma" if n == 0 else "bx_trigamma"
    t = w._buffer(out).c_type
    w.elementwise(out, [x], lambda a: f"(({t}){function}((double)({a})))")


def _flip(w: _Writer, out, x, dims):
    flipped = set(_dims(dims, x.dim())) if len(dims) else set()  # flip(x, ()) is x (a reduction's () means all)
    buffer = w._buffer(out)
    shape = tuple(x.shape)
    w.loops(shape, lambda index: f"{buffer.name}[{w.flat(shape, index)}] = " + w.read(
        x, shape, [f"({shape[d] - 1} - {v})" if d in flipped else v for d, v in enumerate(index)]) + ";")


def _bitwise_not(w: _Writer, out, x):
    """~x: the complement of an integer; of a boolean (stored as a byte 0 or 1), its negation, as PyTorch's
    (the byte's complement, 254 or 255, was read as true: ~(x > 0) was true everywhere)."""
    if out.dtype == torch.bool:
        w.elementwise(out, [x], lambda a: f"(!({a}))")
    else:
        w.elementwise(out, [x], lambda a: f"(({w._buffer(out).c_type})~({a}))")


def _max_binary(w, out, x, y):
    w.elementwise(out, [x, y], lambda a, b: f"(({a}) > ({b}) || ({a}) != ({a}) ? ({a}) : ({b}))")


def _min_binary(w, out, x, y):
    w.elementwise(out, [x, y], lambda a, b: f"(({a}) < ({b}) || ({a}) != ({a}) ? ({a}) : ({b}))")


def _log_softmax(w: _Writer, out, x, dim, half_to_float=False):
    """log softmax along dim: x - max - log sum exp(x - max), one pass for the max and one for the sum."""
    _softmax_like(w, out, x, dim, log=True)


def _softmax(w: _Writer, out, x, dim, half_to_float=False):
    _softmax_like(w, out, x, dim, log=False)


def _running_max(t: str, n: int, value: str) -> str:
    """C that declares m, the largest of ``value`` over k < n (-INFINITY for none), and s = 0 for the sum of
    exp(value - m) that follows: the first pass of a stable softmax or logsumexp."""
    return f"{t} m = -INFINITY, s = 0; for (int64_t k = 0; k < {n}; k++) {{ {t} v = {value}; if (v > m) m = v; }}"


def _sum_exp(t: str, n: int, value: str) -> str:
    """C that adds exp(value - m) over k < n to s: the second pass."""
    return f"for (int64_t k = 0; k < {n}; k++) {{ {t} v = {value}; s += exp(v - m); }}"


def _softmax_like(w: _Writer, out, x, dim, log: bool):
    if x.dim() == 0:  # the softmax of one number
        x, out = x.reshape(1), out.reshape(1)
    buffer = w._buffer(out)
    dim = dim % max(x.dim(), 1)
    shape = tuple(x.shape)
    outer = tuple(n for d, n in enumerate(shape) if d != dim)
    strides = _contiguous_strides(shape)
    outer_strides = tuple(s for d, s in enumerate(strides) if d != dim)
    n, step, t = shape[dim], strides[dim], buffer.c_type

    def statement(index):
        full = list(index)
        full.insert(dim, "k")
        value = w.read(x, shape, full, t)
        base = w.flat(outer, index, outer_strides)
        result = "v - m - log(s)" if log else "exp(v - m) / s"
        return (f"{{ {_running_max(t, n, value)} if (m == -INFINITY) m = 0; {_sum_exp(t, n, value)} "
                f"for (int64_t k = 0; k < {n}; k++) {{ {t} v = {value}; {buffer.name}[{base} + k*{step}] = {result}; }} }}")

    w.loops(outer, statement)


UNARY = {
    aten.exp.default: "exp({a})", aten.log.default: "log({a})", aten.log1p.default: "log1p({a})",
    aten.expm1.default: "expm1({a})", aten.sqrt.default: "sqrt({a})", aten.rsqrt.default: "(({t})1 / sqrt({a}))",
    aten.abs.default: "fabs({a})", aten.neg.default: "(-{a})", aten.tanh.default: "tanh({a})",
    aten.sigmoid.default: "(({t})1 / (({t})1 + exp(-{a})))", aten.sin.default: "sin({a})",
    aten.cos.default: "cos({a})", aten.tan.default: "tan({a})", aten.atan.default: "atan({a})",
    aten.asin.default: "asin({a})", aten.acos.default: "acos({a})", aten.sinh.default: "sinh({a})",
    aten.cosh.default: "cosh({a})", aten.asinh.default: "asinh({a})", aten.acosh.default: "acosh({a})",
aten.erf.default: "erf({a})", aten.erfc.default: "erfc({a})",
    aten.lgamma.default: "lgamma({a})", aten.digamma.default: "(({t})bx_digamma((double)({a})))",
    aten.floor.default: "floor({a})", aten.ceil.default: "ceil({a})",
    aten.round.default: "nearbyint({a})", aten.trunc.default: "trunc({a})",
    aten.reciprocal.default: "(({t})1 / {a})", aten.sign.default: "(({t})(({a}) > 0) - ({t})(({a}) < 0))",
    aten.log2.default: "log2({a})", aten.log10.default: "log10({a})", aten.exp2.default: "exp2({a})",
    aten.isnan.default: "(({a}) != ({a}))", aten.logical_not.default: "(!({a}))",
}

BINARY = {
    aten.mul.Tensor: "({a} * {b})", aten.mul.Scalar: "({a} * {b})", aten.div.Scalar: "({a} / {b})",
    aten.atan2.default: "atan2({a}, {b})", aten.fmod.Tensor: "fmod({a}, {b})", aten.fmod.Scalar: "fmod({a}, {b})",
    aten.logical_and.default: "(({a}) && ({b}))", aten.logical_or.default: "(({a}) || ({b}))",
    aten.logical_xor.default: "((!({a})) != (!({b})))",
    aten.bitwise_and.Tensor: "(({a}) & ({b}))", aten.bitwise_or.Tensor: "(({a}) | ({b}))",
    aten.bitwise_xor.Tensor: "(({a}) ^ ({b}))", aten.hypot.default: "hypot({a}, {b})",
    aten.copysign.Tensor: "copysign({a}, {b})",
}

COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

HANDLERS = {
    **{op: _unary(template) for op, template in UNARY.items()},
    **{op: _binary(template) for op, template in BINARY.items()},
    **{getattr(getattr(aten, name), kind): _comparison(symbol) for name, symbol in COMPARISONS.items()
       for kind in ("Tensor", "Scalar")},
    aten.bitwise_and.Scalar: _binary("(({a}) & ({b}))"), aten.bitwise_or.Scalar: _binary("(({a}) | ({b}))"),
    aten.add.Tensor: _add, aten.add.Scalar: _add, aten.sub.Tensor: _sub, aten.sub.Scalar: _sub,
    aten.div.Tensor: _div, aten.div.Tensor_mode: _div,
    aten.pow.Tensor_Scalar: _pow_scalar, aten.pow.Tensor_Tensor: _pow_tensor, aten.pow.Scalar: _pow_base,
    aten.where.self: _where, aten.clamp.default: _clamp, aten.clamp_min.default: _clamp_min,
    aten.clamp_max.default: _clamp_max, aten.bitwise_not.default: _bitwise_not, aten.maximum.default: _max_binary, aten.minimum.default: _min_binary,
    aten.clone.default: _copy_like, aten._to_copy.default: _copy_like,
    aten.sum.dim_IntList: _reduce("sum"), aten.mean.dim: _reduce("mean"),
    aten.mean.default: _reduce_all("mean"), aten.amax.default: _reduce("amax"), aten.amin.default: _reduce("amin"),
    aten.max.default: _reduce_all("amax"), aten.min.default: _reduce_all("amin"), aten.prod.dim_int: _prod_dim,
    aten.prod.default: _reduce_all("prod"),
    aten.cumsum.default: _cumulative("sum"), aten.cumprod.default: _cumulative("prod"),
    aten.mm.default: _mm, aten.bmm.default: _bmm, aten.addmm.default: _addmm,
    aten.cat.default: _cat, aten.flip.default: _flip, aten.polygamma.default: _polygamma, aten.constant_pad_nd.default: _constant_pad,
    aten.slice_scatter.default: _slice_scatter, aten.diagonal_scatter.default: _diagonal_scatter,
    aten.index.Tensor: _index, aten.index_put.default: _index_put, aten.index_select.default: _index_select,
    aten.gather.default: _gather, aten.scatter_add.default: _scatter_add, aten.embedding.default: _embedding,
    aten._log_softmax.default: _log_softmax, aten._softmax.default: _softmax,
}
"""The per-operator writers: every entry is tested against eager PyTorch on torch's own operator samples
(tests/test_codegen_ops.py). Operators that compiled._decompositions() rewrites before the writer sees them
(rsub, sum.default, mv, dot, select_scatter, index_add, logsumexp, _unsafe_index, _unsafe_index_put) have
no entry: a density never reaches the writer with them; nor has aten.copy (autograd has no derivative for it:
a density that copies a parameter-dependent tensor with it is not traced). Nor has atanh: its gradient writes 1 - x^2 in place
into a constant (``empty_like(x).fill_(1).sub_(x^2)``), which _Writer._in_place refuses, so no density with
atanh is written here, and the entry could not be tested. clamp_min and clamp_max stay: they are decomposed, but
their in-place forms (``x.clamp_min_(a)``) are not, and are written through these entries."""

VIEWS = {
    aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.expand.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.select.int, aten.slice.Tensor,
    aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default, aten.alias.default,
    aten.detach.default, aten.diagonal.default, aten.as_strided.default, aten.unfold.default,
    aten.expand_as.default, aten.view_as.default, aten.unbind.int, aten.split.Tensor, aten.narrow.default,
    aten.lift_fresh.default, aten.contiguous.default,
}
"""Operators whose result may share their input's storage (a view: no code)."""

RESHAPES = {aten.view.default, aten._unsafe_view.default}
"""Views that need their input's strides to allow the new shape (_Writer._viewable)."""

METADATA_IN_PLACE = {aten.squeeze_.dim, aten.squeeze_.dims, aten.squeeze_.default, aten.unsqueeze_.default,
                     aten.t_.default, aten.transpose_.default, aten.as_strided_.default}
"""In-place operators that change a tensor's sizes and strides, never its numbers."""

DATA_IN_PLACE = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor, aten.zero_.default}
"""In-place operators that overwrite a tensor's numbers (written into its buffer, see _Writer._in_place)."""

VALUE_FREE = {aten.full_like.default, aten.zeros_like.default, aten.ones_like.default, aten.empty_like.default,
              aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.new_empty.default,
              aten.scalar_tensor.default, aten.full.default, aten.zeros.default, aten.ones.default,
              aten.empty.memory_format, aten.arange.start_step, aten.arange.default, aten.arange.start}
"""Operators whose numbers do not depend on their inputs' numbers (only on shapes): constants."""


def generate(graph: torch.fx.GraphModule, dim: int, dtype: torch.dtype, fold_loops: bool = True,
             simd_math: str = "") -> Generated:
    """The C source of ``graph`` (one input (dim,), outputs (log pi, grad)) in ``dtype`` (module docstring), its
    repeated blocks written as C loops (bayesx.native.loops; ``fold_loops=False``: every operation written out);
    ``simd_math``: declarations of the math functions' SIMD variants (bayesx.native.build.simd_declarations; the
    library is then linked with libmvec). Raises Unsupported with the reason where an operation has no C here."""
    with torch.no_grad():
        return _Writer(graph, dim, dtype, fold_loops, simd_math).run()
