"""Loops stay loops: the repeated blocks of a traced density's C written once, as a C loop over the block.

A density written with a Python ``for`` over time (a hidden-Markov forward pass, a fixed-step Runge-Kutta ODE
solve) traces to a graph that repeats one block of operations per step, and its gradient repeats the block's
backward pass in reverse. Written out operation by operation (bayesx.native.codegen), a 400-step recursion
became ~48,000 lines of C that the C compiler took minutes over. This module folds the writer's output instead:

1. every operation the writer emits is one *segment* of C; a segment is split into its structure (the text with
   every number and every generated name taken out) and its parameters (the numbers, the workspace offsets of
   the buffers it reads and writes, the constant arrays it reads); loop variables and index temporaries are
   renamed in order of appearance, so two steps of a recursion give the same structure;
2. the sequence of structures is searched for the repetition that covers the most segments: for every period P,
   ``key[s] == key[s + P]`` holds over a run of L positions exactly where the block of P segments starting at s
   repeats ``(L + P) // P`` times (at least MIN_STEPS); the best run is folded and the search repeats on either
   side of it (so the forward pass and the reverse backward pass each become a loop);
3. each parameter's values over the K repetitions are written as ``a + b*t`` where they advance by a constant
   stride (slice offsets into the data, fresh workspace buffers, the step's bounds-check number), else as a
   table indexed by the loop counter t (a time t_k that Python computed in floating point, the ping-pong offsets of
   reused buffers, the carried state's first buffer from before the loop, one constant array per step).

The loop's body is the first repetition's text with each parameter replaced by its expression, so iteration t
executes exactly the text the unrolled code had for step t (the same operations on the same buffers in the same
order): the fold changes the code's size, never what it computes. Blocks whose steps differ (a branch on the data,
a different operation at some step) have different structures and stay unrolled, or fold only where they agree.
Densities need no special API: the repetition is found in what a plain Python loop traced to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

MIN_STEPS = 4
"""Fewest repetitions worth a loop (fewer stay unrolled)."""
MAX_PERIOD = 4000
"""Longest block (segments) searched for; a longer body would gain little over the unrolled code."""

_TOKEN = re.compile(r"(?<![A-Za-z_0-9.])(?:(?P<name>[ixbc]\d+)"
                    r"|(?P<real>(?:\d+\.\d*(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)f?)"
                    r"|(?P<int>\d+(?:LL)?))(?![A-Za-z_0-9.])")
"""The tokens a segment's parameters are: generated names (loop variables and index temporaries i/x, buffers b,
constants c, each a letter and a number) and numeric literals, none of them part of a longer name (log1p,
int64_t) or number."""
_DECLARATION = re.compile(r"^(?P<type>[A-Za-z_][A-Za-z_0-9]*) \*restrict (?P<name>b\d+) = "
                          r"\((?P=type) \*\)\(w \+ (?P<offset>\d+)\);$")


@dataclass(frozen=True)
class Folded:
    """What folding did: the loops written (each: repetitions, segments per repetition) and the segments in all."""

    loops: tuple[tuple[int, int], ...]
    segments: int
    nested: int = 0  # loops with a loop inside their block

    def describe(self) -> str:
        if not self.loops:
            return f"{self.segments} operations, no repeated block"
        steps = ", ".join(f"{k} x {p}" for k, p in self.loops)
        covered = sum(k * p for k, p in self.loops)
        inside = f", {self.nested} with a nested loop" if self.nested else ""
        return (f"{covered} of {self.segments} operations folded into {len(self.loops)} loop(s) ({steps} operations"
                f"{inside})")


@dataclass
class _Segment:
    """One operation's C: its structure (text with holes) and its parameters, one per hole."""

    structure: str
    holes: list[tuple[str, str]]  # (kind, value): "int"/"real" (the literal's text), "buffer"/"constant" (a name)
    declares: str | None  # the workspace buffer the segment declares, if any
    text: str  # the segment as written (its declaration dropped)


def split_segment(lines: list[str], types: dict[str, str]) -> _Segment:
    """The structure and parameters of one segment (``types``: every buffer's and constant's C type by name).
    A buffer's declaration line is taken out (buffers are declared where they are used: :func:`fold`)."""
    declares = None
    if lines:
        match = _DECLARATION.match(lines[0])
        if match:
            declares, lines = match["name"], lines[1:]
    text = "\n".join(lines)
    pieces, holes, local_names = [], [], {}
    last = 0
    for match in _TOKEN.finditer(text):
        pieces.append(text[last:match.start()])
        last = match.end()
        token = match.group()
        kind = match.lastgroup
        if kind == "name":
            if token[0] in "ix":
                pieces.append(local_names.setdefault(token, f"bx_l{len(local_names)}"))
            elif token in types:
                pieces.append(f"\0{'buffer' if token[0] == 'b' else 'constant'}:{types[token]}\0")
                holes.append(("buffer" if token[0] == "b" else "constant", token))
            else:
                pieces.append(token)
            continue
        pieces.append(f"\0{kind}\0")
        holes.append((kind, token))
    pieces.append(text[last:])
    return _Segment("".join(pieces), holes, declares, text)


def _best_run(keys: np.ndarray, lo: int, hi: int) -> tuple[int, int, int] | None:
    """(start, period, repetitions) of the repetition in keys[lo:hi] that covers the most segments, or None
    where none repeats MIN_STEPS times."""
    part = keys[lo:hi]
    n = len(part)
    best, best_saved = None, 0
    for period in range(1, min(MAX_PERIOD, n // MIN_STEPS) + 1):
        same = part[:-period] == part[period:]
        if not same.any():
            continue
        # runs of True: starts and ends from the edges of the padded 0/1 sequence
        edges = np.diff(np.concatenate(([0], same.view(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        lengths = ends - starts
        i = int(np.argmax(lengths))
        reps = (int(lengths[i]) + period) // period
        saved = (reps - 1) * period
        if reps >= MIN_STEPS and saved > best_saved:
            best, best_saved = (lo + int(starts[i]), period, reps), saved
    return best


def _inner_run(block: np.ndarray) -> tuple[int, int, int] | None:
    """The repetition inside one block of a loop (written as a nested loop), or None."""
    return _best_run(block, 0, len(block)) if len(block) >= 2 * MIN_STEPS else None


def _find_runs(keys: np.ndarray, lo: int, hi: int, found: list[tuple[int, int, int]]) -> None:
    run = _best_run(keys, lo, hi)
    if run is None:
        return
    start, period, reps = run
    _find_runs(keys, lo, start, found)
    found.append(run)
    _find_runs(keys, start + period * reps, hi, found)


class _Emitter:
    """Writes the folded body: segments outside loops as they were, loops with their parameters' expressions."""

    def __init__(self, addresses: dict[str, tuple[str, int]], external: frozenset[str] = frozenset()):
        self.addresses = addresses  # workspace buffer -> (C type, byte offset)
        self.external = external  # constants passed at run time (pointers set inside the function)
        self.declared: set[str] = set()
        self.tables: list[str] = []
        self.local_tables: list[str] = []  # tables of pointers to run-time data: declared inside the function
        self.lines: list[str] = []
        self.loops = 0
        self.nested = 0

    def declare(self, name: str) -> None:
        """A workspace buffer's pointer, at function scope, before its first use outside a loop."""
        if name in self.declared or name not in self.addresses:
            return
        c_type, offset = self.addresses[name]
        self.lines.append(f"{c_type} *restrict {name} = ({c_type} *)(w + {offset});")
        self.declared.add(name)

    def straight(self, segment: _Segment) -> None:
        for kind, value in segment.holes:
            if kind == "buffer":
                self.declare(value)
        self.lines.append(segment.text)

    def loop(self, segments: list[_Segment], period: int, reps: int,
             inner: tuple[int, int, int] | None = None) -> None:
        """``reps`` repetitions of the block of ``period`` segments (segments[k*period + j]) as one C loop; ``inner``
        (start, period, repetitions within the block): a repetition inside every block, written as a nested loop."""
        self.loops += 1
        outer = f"bx_t{self.loops}"
        head: list[str] = []
        first, inner_end = (inner[0], inner[0] + inner[1] * inner[2]) if inner else (period, period)

        def instances(positions):
            return [self._instance([segments[k * period + j] for k in range(reps)], (reps,), (outer,), head)
                    for j in positions]

        before, after = instances(range(first)), instances(range(inner_end, period))
        nested: list[str] = []
        if inner:
            self.nested += 1
            start, p, r = inner
            counter = f"bx_u{self.loops}"
            nested_head, nested_body = [], []
            for j in range(p):
                block = [segments[k * period + start + i * p + j] for k in range(reps) for i in range(r)]
                nested_body.append(self._instance(block, (reps, r), (outer, counter), nested_head))
            nested = [f"for (int64_t {counter} = 0; {counter} < {r}; {counter}++) {{", *nested_head, *nested_body, "}"]
        self.lines.extend([f"for (int64_t {outer} = 0; {outer} < {reps}; {outer}++) {{", *head, *before, *nested,
                           *after, "}"])

    def _instance(self, block: list[_Segment], shape: tuple[int, ...], counters: tuple[str, ...],
                  head: list[str]) -> str:
        """One segment's text in a loop: ``block`` its instances (shape: the loops' repetitions, C order), each
        hole replaced by the expression of its values over the loop counters; new buffer pointers go to ``head``."""
        parts = block[0].structure.split("\0")
        out = [parts[0]]
        for h in range(len(block[0].holes)):
            kind = block[0].holes[h][0]
            values = [s.holes[h][1] for s in block]
            if kind == "buffer":
                c_type = self.addresses[values[0]][0]
                offsets = [self.addresses[v][1] for v in values]
                expression = self._integer(offsets, shape, counters, "int64_t")
                declaration = f"({c_type} *)(w + {expression})"
                name = next((line.split(" = ")[0].split("*")[-1] for line in head
                             if line.endswith(f" = {declaration};")), None)
                if name is None:
                    name = f"bx_p{self.loops}_{len(counters)}_{len(head)}"
                    head.append(f"{c_type} *{name} = {declaration};")
                out.append(name)
            elif kind == "constant":
                out.append(values[0] if all(v == values[0] for v in values) else
                           self._table(f"{parts[2 * h + 1].split(':', 1)[1]} *", values, shape, counters, True))
            elif kind == "int":
                if all(v == values[0] for v in values):
                    out.append(values[0])
                else:
                    out.append(self._integer([int(v.removesuffix("LL")) for v in values], shape, counters, "int64_t"))
            else:
                out.append(values[0] if all(v == values[0] for v in values) else
                           self._table("float" if values[0].endswith("f") else "double", values, shape, counters))
            out.append(parts[2 * h + 2])
        return "".join(out)

    def _integer(self, values: list[int], shape: tuple[int, ...], counters: tuple[str, ...], c_type: str) -> str:
        """``values`` (over the loops, C order) as C: a literal, ``a + b*t (+ c*u)``, or a table lookup."""
        grid = np.asarray(values, dtype=object).reshape(shape)
        first = int(grid.flat[0])
        strides = [int(grid[(1,) + (0,) * (len(shape) - 1)] - first) if shape[0] > 1 else 0]
        if len(shape) == 2:
            strides.append(int(grid[0, 1] - first) if shape[1] > 1 else 0)
        index = np.indices(shape)
        affine = first + sum(stride * index[d] for d, stride in enumerate(strides))
        if np.array_equal(affine.astype(object), grid):
            terms = [f"{stride}*{counter}" for stride, counter in zip(strides, counters) if stride]
            literal = f"{first}LL" if abs(first) > 2**31 - 1 else str(first)
            return f"({' + '.join([literal, *terms])})" if terms else literal
        return self._table(c_type, [str(v) for v in values], shape, counters)

    def _table(self, c_type: str, values: list[str], shape: tuple[int, ...], counters: tuple[str, ...],
               pointer: bool = False) -> str:
        name = f"bx_table{len(self.tables) + len(self.local_tables)}"
        qualifier = f"const {c_type}const" if pointer else f"const {c_type}"
        declaration = f"{qualifier} {name}[{len(values)}] = {{{','.join(values)}}};"
        if pointer and any(value in self.external for value in values):  # addresses known only at run time
            self.local_tables.append(declaration)
        else:
            self.tables.append("static " + declaration)
        index = counters[0] if len(shape) == 1 else f"{counters[0]}*{shape[1]} + {counters[1]}"
        return f"{name}[{index}]"


def fold(segments: list[list[str]], addresses: dict[str, tuple[str, int]],
         types: dict[str, str], external: frozenset[str] = frozenset()) -> tuple[list[str], list[str], Folded]:
    """The writer's body (one list of lines per operation) with its repeated blocks as loops (module docstring):
    (the body's lines, the tables the loops read (file scope), what was folded). ``addresses``: every workspace
    buffer's C type and byte offset; ``types``: every buffer's and constant's C type; ``external``: the constants
    that are data passed at run time (a table of their addresses is declared at the top of the body instead)."""
    split = [split_segment(lines, types) for lines in segments if lines]
    interned: dict[str, int] = {}
    keys = np.array([interned.setdefault(s.structure, len(interned)) for s in split], dtype=np.int64)
    runs: list[tuple[int, int, int]] = []
    _find_runs(keys, 0, len(split), runs)
    emitter = _Emitter(addresses, external)
    position = 0
    for start, period, reps in runs:
        for segment in split[position:start]:
            emitter.straight(segment)
        emitter.loop(split[start:start + period * reps], period, reps, _inner_run(keys[start:start + period]))
        position = start + period * reps
    for segment in split[position:]:
        emitter.straight(segment)
    return ([*emitter.local_tables, *emitter.lines], emitter.tables,
            Folded(tuple((r, p) for _, p, r in runs), len(split), emitter.nested))
