"""Schedule stage: the execution order with the smallest peak memory (Liberis, Algorithm 1, made iterative).

Liberis's MEM recursion memoises on the set of tensors still to produce; it is exponential in the graph's width and
recurses once per operator, so a 300-op chain overflows Python's stack. We search the same space forwards and
iteratively: a state is the set of computed nodes (a bitmask), the cost of a state is the largest step cost on the way
to it, and a bottleneck-Dijkstra search (a heap, no recursion) pops states in order of that cost, so the first time
the full set is popped its cost is the optimal peak. The in-place rules are part of the step cost (they depend on
which tensors die at the step, i.e. on the state). Three things keep it small:
- bound: a heuristic order (the given order, and greedy smallest-step-next) gives an upper bound; states that cannot
  beat it are never pushed; when it equals the lower bound (below) no search is needed at all — a chain's order is
  forced, so a 300-node chain is proven optimal at once;
- dominance (chain collapsing): when a ready node neither raises the running peak nor grows the held bytes, running
  it now is never worse than running it later (moving it forward never raises a later step: it only frees bytes
  earlier, and an op's in-place saving can only grow as more of its input's readers are done), so it is the only
  move tried; single-in/single-out runs that do not grow memory collapse into forced moves. (Collapsing every chain
  outright would not be exact: switching branches after a chain node that grows memory can lower the peak.)
- budget: more than `PlanOptions.exact_budget` states falls back to the heuristic order, with `optimal=False`.

A fusable conv + ADD pair (inplace.py) is one move of two nodes when it can fuse from the state (the ADD's other
input is computed and has no reader left but the ADD): fused and adjacent is never worse than running the ADD later
(the ADD's output only replaces the residual, and the conv's output is never held), so the conv alone is not tried
then. Elsewhere the conv alone is a move, but never a forced one (forcing it could split a pair that should fuse).

`lower_bound` = max over nodes of the bytes any order must hold at that node: units produced by an ancestor and read
by the node or a descendant (or graph outputs), plus the cheapest way to produce its output (in place if it can).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from ..analysis.shapes import activation_inputs
from ..ir import Graph
from .inplace import Aliases, find_aliases, output_units
from .plan_types import DEFAULT_OPTIONS, PlanOptions
from .scratch import kernel_scratch


@dataclass(frozen=True)
class ReorderResult:
    order: tuple[str, ...]
    peak: int  # live bytes at the worst step (scratch included), under the in-place rules
    optimal: bool  # proven minimal over all topological orders
    lower_bound: int
    states: int  # search states visited (0 when the bound settled it)
    notes: tuple[str, ...] = ()


class _Model:
    """The graph as bitmasks: node i is bit i (graph order); storage units are indices into `size`."""

    def __init__(self, graph: Graph, options: PlanOptions, pinned=frozenset(), aliases: Aliases | None = None):
        al = aliases or find_aliases(graph, options, pinned)
        self.names = [n.name for n in graph.nodes]
        index = {name: i for i, name in enumerate(self.names)}
        roots = list(al.size)
        uid = {r: k for k, r in enumerate(roots)}
        self.size = [al.size[r] for r in roots]
        outs = output_units(graph, al)
        self.is_out = [r in outs for r in roots]
        self.prod = [0] * len(roots)
        self.cons = [0] * len(roots)
        self.preds = [0] * len(self.names)
        self.succs: list[list[int]] = [[] for _ in self.names]
        self.in_units, self.out_unit, self.cand_units = [], [], []
        self.scratch_reg, self.scratch_inp = [], []
        # fusable conv i -> (its ADD, the conv output's unit, the residual's unit); the ADD -> the same triple
        self.fuse: list[tuple[int, int, int] | None] = [None] * len(self.names)
        self.fused_into: list[tuple[int, int, int] | None] = [None] * len(self.names)
        for conv, pair in al.fusable.items():
            triple = (index[pair.add], uid[al.root[pair.conv_out]], uid[al.root[pair.residual]])
            self.fuse[index[conv]] = triple
            self.fused_into[index[pair.add]] = (index[conv], *triple[1:])
        for i, n in enumerate(graph.nodes):
            self.prod[uid[al.root[n.outputs[0]]]] |= 1 << i
            ins = [t for t in activation_inputs(graph, n) if t in al.root]
            for t in ins:
                self.cons[uid[al.root[t]]] |= 1 << i
                p = index[graph.producer(t).name]
                if not self.preds[i] >> p & 1:
                    self.preds[i] |= 1 << p
                    self.succs[p].append(i)
            self.in_units.append(tuple(dict.fromkeys(uid[al.root[t]] for t in ins)))
            self.out_unit.append(uid[al.root[n.outputs[0]]])
            self.cand_units.append(tuple(uid[al.root[t]] for t in al.candidates.get(n.name, ())))
            self.scratch_reg.append(kernel_scratch(graph, n, options.kernels))
            self.scratch_inp.append(al.inplace_scratch.get(n.name, 0))

    def live(self, u: int, done: int) -> bool:
        return bool(self.prod[u] & done) and (self.is_out[u] or bool(self.cons[u] & ~done))

    def step(self, done: int, held: int, v: int) -> tuple[int, int]:
        """(bytes live while node v runs after the set `done`, bytes held after it). The hot loop of the search."""
        after = done | 1 << v
        size, cons, is_out = self.size, self.cons, self.is_out
        freed, src = 0, None
        for u in self.in_units[v]:  # produced already (v reads them): they die iff all readers are done
            if not is_out[u] and not cons[u] & ~after:
                freed += size[u]
                if src is None and u in self.cand_units[v]:
                    src = u
        uo = self.out_unit[v]
        if self.prod[uo] & done and (is_out[uo] or cons[uo] & ~done):
            new = 0  # the unit already holds its bytes (a concat slice, a reshape alias)
            held_after = held - freed
        else:
            new = size[uo] if src is None else max(0, size[uo] - size[src])  # in place: over the dying input
            held_after = held - freed + (size[uo] if is_out[uo] or cons[uo] & ~after else 0)
        scratch = self.scratch_reg[v] if src is None else self.scratch_inp[v]
        return held + new + scratch, held_after

    def can_fuse(self, done: int, v: int) -> bool:
        """Whether conv v, run after the set `done`, fuses with its ADD (run right after it)."""
        if self.fuse[v] is None:
            return False
        a, _, ur = self.fuse[v]
        after = done | 1 << v | 1 << a
        return not self.preds[a] & ~(done | 1 << v) and not self.is_out[ur] and not self.cons[ur] & ~after

    def fused_step(self, done: int, held: int, v: int) -> tuple[int, int]:
        """(bytes live, bytes held after) for conv v and its ADD run as one fused step after `done`."""
        a, _, ur = self.fuse[v]
        size, cons, is_out = self.size, self.cons, self.is_out
        after = done | 1 << v
        conv_live = held + self.scratch_reg[v]  # the conv's output takes no bytes
        held -= sum(size[u] for u in self.in_units[v] if not is_out[u] and not cons[u] & ~after)
        uo = self.out_unit[a]
        add_live = held + max(0, size[uo] - size[ur])  # the ADD's output over the dying residual
        held_after = held - size[ur] + (size[uo] if is_out[uo] or cons[uo] & ~(after | 1 << a) else 0)
        return max(conv_live, add_live), held_after

    def moves(self, done: int, held: int, ready: int) -> list[tuple[tuple[int, ...], int, int]]:
        """Every next move from a state: (nodes run, bytes live, bytes held after); a fusing pair is one move."""
        out = []
        for v in _bits(ready):
            if self.can_fuse(done, v):
                out.append(((v, self.fuse[v][0]), *self.fused_step(done, held, v)))
            else:
                out.append(((v,), *self.step(done, held, v)))
        return out

    def run(self, ready: int, done: int, nodes: tuple[int, ...]) -> tuple[int, int]:
        """(ready set, done set) after running `nodes` in order."""
        for v in nodes:
            ready = self.ready_after(ready, done, v)
            done |= 1 << v
        return ready, done

    def ready_after(self, ready: int, done: int, v: int) -> int:
        after = done | 1 << v
        ready &= ~(1 << v)
        for w in self.succs[v]:
            if self.preds[w] & ~after == 0:
                ready |= 1 << w
        return ready

    def initial_ready(self) -> int:
        return sum(1 << i for i, p in enumerate(self.preds) if p == 0)


@dataclass(frozen=True)
class _Start:
    """Where the search starts: nodes already run (a forced prefix, e.g. a patch stage), bytes held, ready set."""

    done: int
    held: int
    ready: int
    prefix: tuple[int, ...]


def _start(model: _Model, prefix: tuple[int, ...]) -> _Start:
    done = held = 0
    ready = model.initial_ready()
    for v in prefix:
        if not ready >> v & 1:
            raise ValueError(f"forced prefix: node '{model.names[v]}' runs before its inputs")
        _, held = model.step(done, held, v)
        ready = model.ready_after(ready, done, v)
        done |= 1 << v
    return _Start(done, held, ready, prefix)


def _bits(mask: int):
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def order_peak(model: _Model, order: list[int], start: _Start) -> int:
    """Peak of the steps of `order` after the start's prefix (`order` excludes the prefix); a fusable conv followed
    by its ADD is one fused step when it can fuse (as liveness.py decides)."""
    done, held, peak, k = start.done, start.held, 0, 0
    while k < len(order):
        v = order[k]
        pair = k + 1 < len(order) and model.fuse[v] is not None and order[k + 1] == model.fuse[v][0]
        if pair and model.can_fuse(done, v):
            cost, held = model.fused_step(done, held, v)
            done |= 1 << v | 1 << order[k + 1]
            k += 2
        else:
            cost, held = model.step(done, held, v)
            done |= 1 << v
            k += 1
        peak = max(peak, cost)
    return peak


def greedy_order(model: _Model, start: _Start) -> list[int]:
    """Smallest-step-next: run the ready move with the cheapest step (then the least held after, then graph order)."""
    done, held, ready = start.done, start.held, start.ready
    order: list[int] = []
    while ready:
        nodes, _, held = min(model.moves(done, held, ready), key=lambda m: (m[1], m[2], m[0]))
        order.extend(nodes)
        ready, done = model.run(ready, done, nodes)
    return order


def lower_bound(model: _Model, start: _Start) -> int:
    """Max over nodes after the prefix of the bytes every order holds while that node runs (module docstring).

    A unit is held at node v when one of its producers is an ancestor of v and (it is a graph output or) one of its
    readers is v or a descendant: per unit, the nodes where that holds are one bitmask (descendants of its producers
    AND ancestors-or-self of its readers), so the sums take one pass over units."""
    n = len(model.names)
    anc = [0] * n
    for v in range(n):  # graph order is topological
        for p in _bits(model.preds[v]):
            anc[v] |= anc[p] | 1 << p
    desc = [0] * n
    for v in range(n - 1, -1, -1):
        for s in model.succs[v]:
            desc[v] |= desc[s] | 1 << s
    held_at = [0] * n  # bytes of the units every order holds while v runs
    where = []  # per unit: the nodes that must hold it
    todo = ((1 << n) - 1) & ~start.done
    for u, size in enumerate(model.size):
        after = 0
        for p in _bits(model.prod[u]):
            after |= desc[p]
        before = (1 << n) - 1 if model.is_out[u] else 0
        for c in _bits(model.cons[u] if not model.is_out[u] else 0):
            before |= anc[c] | 1 << c
        where.append(after & before)
        for v in _bits(after & before & todo):
            held_at[v] += size
    best = 0
    for v in _bits(todo):
        uo, cands, held = model.out_unit[v], model.cand_units[v], held_at[v]
        out_held = where[uo] >> v & 1
        produce = model.scratch_reg[v] + (0 if out_held or model.fuse[v] else model.size[uo])
        if model.fused_into[v] is not None:  # fused, the conv's output is never held and the residual is overwritten
            _, uy, ur = model.fused_into[v]
            if where[uy] >> v & 1:
                held -= model.size[uy]
                out_held = out_held and uy != uo
            cands = (*cands, ur)
        for u in cands:
            if not out_held and not model.is_out[u] and not model.cons[u] & desc[v]:
                produce = min(produce, max(0, model.size[uo] - model.size[u]) + model.scratch_inp[v])
        best = max(best, held + produce)
    return best


def _forced_move(model: _Model, moves: list, held: int, d: int):
    """A move (nodes, cost, held after) that neither raises the running peak `d` nor grows the held bytes (never a
    fusable conv alone: see the module docstring)."""
    for move in moves:
        nodes = move[0]
        if move[1] <= d and move[2] <= held and not (len(nodes) == 1 and model.fuse[nodes[0]] is not None):
            return move
    return None


def search(model: _Model, start: _Start, bound: int, budget: int) -> tuple[list[int] | None, int, bool]:
    """Bottleneck-Dijkstra over sets of computed nodes for an order with peak < `bound`.

    Returns (order after the prefix, or None if no order beats `bound`; states visited; finished within `budget`).
    """
    full = (1 << len(model.names)) - 1
    best = {start.done: 0}
    info = {start.done: (start.held, start.ready, None, ())}  # state -> (held, ready, parent, nodes run)
    heap = [(0, 0, 0, start.done)]  # (peak so far, -nodes done, tie, state)
    tie = 0
    while heap:
        d, _, _, done = heapq.heappop(heap)
        if d > best[done]:
            continue
        if done == full:
            return _trace(info, done), len(best), True
        if len(best) > budget:
            return None, len(best), False
        held, ready, _, _ = info[done]
        moves = model.moves(done, held, ready)
        forced = _forced_move(model, moves, held, d)
        moves = [forced] if forced else moves
        for nodes, cost, held_after in moves:
            nd = max(d, cost)
            next_ready, nxt = model.run(ready, done, nodes)
            if nd >= best.get(nxt, bound):
                continue
            best[nxt] = nd
            info[nxt] = (held_after, next_ready, done, nodes)
            tie += 1
            heapq.heappush(heap, (nd, -nxt.bit_count(), tie, nxt))
    return None, len(best), True


def _trace(info: dict, state: int) -> list[int]:
    moves = []
    while info[state][2] is not None:
        _, _, parent, nodes = info[state]
        moves.append(nodes)
        state = parent
    return [v for nodes in reversed(moves) for v in nodes]


def best_order(graph: Graph, options: PlanOptions = DEFAULT_OPTIONS, prefix=(), pinned=frozenset(),
               aliases: Aliases | None = None) -> ReorderResult:
    """The topological order of `graph` with the smallest peak (exact within `options.exact_budget` states).

    `prefix`: node names that must run first, in that order (a patch stage); their steps are not counted in the
    peak (the caller replaces them), only what they leave held; `pinned` as in `find_aliases` (or pass the
    `aliases` already found with them). With
    `options.reorder` False the order is the graph's own (after the prefix) and only its peak and bounds are
    computed.

    >>> from kilobyte.ir import GraphBuilder, Op
    >>> b = GraphBuilder()
    >>> x = b.input((1, 4, 4, 2))
    >>> y = b.node(Op.RELU, [x])
    >>> r = best_order(b.build([y]))
    >>> r.order, r.peak, r.optimal
    (('relu_0',), 32, True)
    """
    model = _Model(graph, options, pinned, aliases)
    names = model.names
    index = {name: i for i, name in enumerate(names)}
    start = _start(model, tuple(index[p] for p in prefix))
    given = [v for v in range(len(names)) if not start.done >> v & 1]
    candidates = [given, greedy_order(model, start)] if options.reorder else [given]
    peaks = [order_peak(model, o, start) for o in candidates]
    k = min(range(len(candidates)), key=peaks.__getitem__)
    ub, lb = peaks[k], lower_bound(model, start)

    def result(rest, peak, optimal, states=0, notes=()):
        return ReorderResult(tuple(names[v] for v in (*start.prefix, *rest)), peak, optimal, lb, states, notes)

    if not options.reorder or ub <= lb:
        return result(candidates[k], ub, ub <= lb)
    found, states, finished = search(model, start, ub, options.exact_budget)
    if found is not None:
        return result(found, order_peak(model, found, start), True, states)
    if finished:
        return result(candidates[k], ub, True, states)
    note = (f"order is heuristic: exact search stopped after {states} states (exact_budget "
            f"{options.exact_budget}); its peak is at most {ub - lb} B above the lower bound {lb} B")
    return result(candidates[k], ub, False, states, (note,))
