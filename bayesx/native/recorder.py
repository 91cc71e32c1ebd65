"""A fast trace of a density's value and gradient: the ATen operations eager autograd runs, recorded as they run.

``make_fx(torch.func.grad_and_value(log_prob))`` records the same forward and backward operations, but at about
2-4 ms an operation on this project's machine (fake-tensor metadata and a Python stack trace for every node, the
functorch grad transform's wrappers): a hidden-Markov forward pass over 416 steps (18,000 operations with its
gradient) took 36-74 s to trace, longer than NumPyro's whole run. Here the density runs once, eagerly, at the point,
under a ``TorchDispatchMode`` that appends one graph node per operation it sees (about 30 us each), and
``torch.autograd.grad`` runs its backward pass under the same mode, so the backward operations are recorded as
well (the autograd engine runs a CPU backward pass on the calling thread, with the caller's dispatch modes).

The graph is what make_fx gives (bayesx.native.compiled's contract): one placeholder (the point, (dim,)), the
data and every tensor made before the trace as ``get_attr`` constants (the tensors themselves, so that views of
the data keep their storage), ATen operations with the decomposition table applied (core ATen and the unrolled
linear algebra, decomposed the way make_fx decomposes: the decomposition runs under the mode, which records the
operations it calls), and the output (log pi summed, its gradient). A density that reads a value of the
parameters back into Python (``.item()``, a branch on a tensor) cannot be recorded: :class:`NotRecorded` with
the operator; the caller then tries make_fx, which raises the same way with its own message.
"""

from __future__ import annotations

import functools
import operator

import torch
from torch import Tensor
from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module
from torch.fx.immutable_collections import immutable_dict
from torch.utils._python_dispatch import TorchDispatchMode

from bayesx.native.codegen import HANDLERS, VALUE_FREE, VIEWS

aten = torch.ops.aten

VALUE_READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default}
"""Operators that hand a tensor's value back to Python (a branch on it follows)."""


def _select_backward(grad: Tensor, input_sizes: list[int], dim: int, index: int) -> Tensor:
    """The gradient of ``x.select(dim, index)``: zeros of x's shape with ``grad`` at the index. The operations of
    core ATen's decomposition (new_zeros, then select_scatter's index mask, unsqueeze, expand and where), written
    without torch._refs' per-call wrappers: 0.5 ms a call, a third of recording an RK4 integrator's gradient."""
    dim = dim % len(input_sizes)
    zeros = grad.new_zeros(input_sizes)
    mask = _index_mask(len(input_sizes), dim, input_sizes[dim], index % input_sizes[dim], grad.device)
    return torch.where(mask, grad.unsqueeze(dim).expand(input_sizes), zeros)


@functools.lru_cache(maxsize=256)
def _index_mask(ndim: int, dim: int, size: int, index: int, device: torch.device) -> Tensor:
    """arange(size) == index along ``dim`` of ``ndim``: one constant per shape and index (a loop's select_backward
    reads the same one at every step; made anew, its arange alone cost 0.2 ms a step)."""
    shape = [1] * ndim
    shape[dim] = -1
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.arange(size, device=device).view(shape) == index


def _stack(tensors: list[Tensor], dim: int = 0) -> Tensor:
    """``torch.stack`` as torch._refs writes it (a cat, then a view or of unsqueezed inputs), without its
    wrappers (0.3 ms a call)."""
    dim = dim % (tensors[0].ndim + 1)
    if dim < tensors[0].ndim:
        sizes = list(tensors[0].shape)
        sizes.insert(dim, len(tensors))
        return torch.cat(tensors, dim).view(sizes)
    return torch.cat([t.unsqueeze(dim) for t in tensors], dim)


QUICK_DECOMPOSITIONS = {aten.select_backward.default: _select_backward, aten.stack.default: _stack}
"""Decompositions that record the same operations as core ATen's, faster (bayesx.native.compiled adds them to
its table, for make_fx as well)."""


class NotRecorded(Exception):
    """Why the density's operations could not be recorded (one line)."""


class _RecordedGraph(torch.fx.Graph):
    """An fx graph whose operation nodes are made without fx's per-node checks: torch 2.13's ``create_node`` walks
    every argument with pytree for symbolic sizes (an eager recording has none) and derives the node's name from
    its operator each time; on an RK4 integrator's 80,000 operations that was a third of the recording. The node
    is made and inserted as ``Graph.create_node`` makes it (torch is pinned); other nodes take fx's own path."""

    _names: dict = {}  # operator -> its node names' stem (fx's own: the operator's name in snake case)

    def create_node(self, op, target, args=None, kwargs=None, name=None, type_expr=None):
        if op != "call_function" or name is not None or self.owning_module is not None:
            return super().create_node(op, target, args, kwargs, name, type_expr)
        stem = self._names.get(target)
        if stem is None:
            stem = self._names[target] = self._target_to_str(target)
        node = torch.fx.Node(self, self._graph_namespace.create_name(stem, None), op, target, args or (),
                             kwargs or immutable_dict(), type_expr)
        self._graph_namespace.associate_name_with_obj(node.name, node)
        self._insert(node)
        self._find_nodes_lookup_table.insert(node)
        self._len += 1
        return node


class _Recording(TorchDispatchMode):
    """Appends every operation dispatched under it to an fx graph (module docstring)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # never run under torch.compile: no dynamo-disabling wrapper around each operation (~15 us)

    def __init__(self, decompositions: dict):
        super().__init__()
        self.decompositions = decompositions
        self.graph = _RecordedGraph()
        self.root = torch.nn.Module()
        self.nodes: dict[int, torch.fx.Node] = {}  # id(tensor) -> the node that made it (tensors kept alive)
        self.alive: list[Tensor] = []
        self.dynamic: set[torch.fx.Node] = set()  # nodes computed from the parameters
        self.constants = 0
        self.expansions: dict = {}  # operator -> its decomposition, None, or False (not looked up yet)

    def input(self, point: Tensor) -> None:
        node = self.graph.placeholder("q")
        self._bind(point, node)
        self.dynamic.add(node)

    def _bind(self, t: Tensor, node: torch.fx.Node) -> None:
        self.nodes[id(t)] = node
        self.alive.append(t)

    def node_of(self, value):
        """The graph value of an argument: a recorded tensor's node, another tensor as a new constant."""
        if not isinstance(value, Tensor):
            return value
        node = self.nodes.get(id(value))
        if node is None:
            name = f"_tensor_constant{self.constants}"
            self.constants += 1
            self.root.register_buffer(name, value)
            node = self.graph.get_attr(name)
            self._bind(value, node)
        return node

    def _args(self, value):
        """Arguments with their tensors as graph values, and whether one of them depends on the parameters."""
        if isinstance(value, Tensor):
            node = self.node_of(value)
            return node, node in self.dynamic
        if isinstance(value, (tuple, list)):
            mapped = [self._args(v) for v in value]
            return type(value)(m for m, _ in mapped), any(d for _, d in mapped)
        return value, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        decomposition = self.expansions.get(func, False)
        if decomposition is False:
            if func in HANDLERS or func in VIEWS or func in VALUE_FREE:
                decomposition = None  # written as C as it is: its decomposition (torch._refs) costs ms a call
            else:
                decomposition = self.decompositions.get(func) or (func.decompose if _composite(func) else None)
            self.expansions[func] = decomposition
        if decomposition is not None:
            with self:
                result = decomposition(*args, **kwargs)
            if result is not NotImplemented:
                return result
        node_args, dynamic = self._args(args)
        node_kwargs = {}
        for key, value in kwargs.items():
            node_kwargs[key], more = self._args(value)
            dynamic = dynamic or more
        if dynamic and func in VALUE_READS:
            raise NotRecorded(f"it reads a value of the parameters back into Python ({func}): a branch on values")
        result = func(*args, **kwargs)
        if not dynamic and _foldable(func, args, result):
            return result  # a constant, a get_attr where a recorded operation reads it
        node = self.graph.call_function(func, node_args, node_kwargs)
        node.meta["val"] = result
        if dynamic:
            self.dynamic.add(node)
        if isinstance(result, Tensor):
            self._bind(result, node)
        elif isinstance(result, (tuple, list)):
            for i, item in enumerate(result):
                if isinstance(item, Tensor):
                    element = self.graph.call_function(operator.getitem, (node, i))
                    element.meta["val"] = item
                    if dynamic:
                        self.dynamic.add(element)
                    self._bind(item, element)
        elif dynamic and result is not None:
            raise NotRecorded(f"{func} returns a {type(result).__name__} computed from the parameters")
        return result


def impure(func) -> bool:
    """Whether evaluating ``func`` once at trace time would change what it computes: a random draw or an in-place
    update."""
    schema = getattr(func, "_schema", None)
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()) or bool(schema is not None and
                                                                                 schema.is_mutable)


def _foldable(func, args, result) -> bool:
    """Whether an operation on constants alone is evaluated here, once, instead of recorded: the rule of
    bayesx.native.compiled's constant folding (pure, not a view, no larger than its largest input)."""
    if not isinstance(result, Tensor) or impure(func) or func in VIEWS:
        return False
    largest = max((a.numel() for a in _flat_tensors(args)), default=0)
    return result.numel() <= max(largest, 1)


def _flat_tensors(value):
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _flat_tensors(v)


def _composite(func) -> bool:
    """Whether ``func`` is defined by other ATen operators (CompositeImplicitAutograd: ``to``, ``real`` of a real
    tensor), decomposed as make_fx decomposes it (a no-op such as ``to`` its own dtype returns its input: no node)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")


def record(log_prob, dim: int, dtype: torch.dtype, decompositions: dict) -> torch.fx.GraphModule:
    """The graph of (log_prob(q).sum(), its gradient) at q = 0 (dim,) in ``dtype`` (module docstring); raises
    NotRecorded, or what the density raises."""
    point = torch.zeros(dim, dtype=dtype, requires_grad=True)
    mode = _Recording(decompositions)
    mode.input(point)
    with mode:
        value = log_prob(point).sum()
        (grad,) = torch.autograd.grad(value, point, allow_unused=True)
        if grad is None:
            grad = torch.zeros_like(point)
    mode.graph.output((mode.node_of(value), mode.node_of(grad)))
    _eliminate_dead_code(mode.graph)
    with _use_lazy_graph_module(True):  # its Python code is written where it is read (AOTInductor), not here
        return _make_graph_module(mode.root, mode.graph)


def _eliminate_dead_code(graph: torch.fx.Graph) -> None:
    """Remove the operations nothing reads (what autograd computed and did not use), in reverse order; in-place
    and random operations stay (fx's own pass, with the impurity looked up once per operator)."""
    kept: dict = {}
    for node in reversed(graph.nodes):
        if node.op != "call_function" or node.users:
            continue
        target = node.target
        if target not in kept:
            kept[target] = target is not operator.getitem and impure(target)
        if not kept[target]:
            graph.erase_node(node)
