# SPDX-License-Identifier: MIT
"""air-annotate-refeed as aircc runs it (mlir-air at e972f29), for the resource model.

A buffer filled once and sent N times has one correct lowering in aircc: the refeed primitive, an
scf.for of static trip count whose body is one `air.channel.put` and otherwise only memory-effect-free
ops that use nothing defined in the body, the put itself using neither the induction variable nor an
iter_arg (matchRefeedLoop, AIRMiscPasses.cpp ~3370-3424). aircc runs the pass first in its pipeline
(aircc.cpp ~1130): the loop is erased and the count written as `air.refeed_count`:

* on the put's source alloc when the source is L2 (it primes the memtile's fill lock), else on the put
  (getRefeedCarrier ~3432-3446); an L2 source that is not a memref.alloc fails the pass;
* nested matched loops around one put multiply, sibling loops on one carrier add
  (accumulateRefeed ~3448-3474; tests @nested_composes 3 x 4 -> 12, @counts_add 3 + 4 -> 7);
* a one-trip loop is erased with no count (@single_trip).

Nothing in mlir-air range-checks the count, but it becomes a lock's initial value, and AIE2P locks hold
6 bits (mlir-aie AIE2TargetModel::getMaxLockValue = 0x3F; mlir-air's fused_decode.py splits its counts
for this reason): a count above 63 is refused here. And air-split-l2-memref, which runs later, creates
its pieces as fresh allocs without the attribute (AIRMiscPasses.cpp ~1932-1944; the comment at
~2191-2195): a refed L2 buffer that the split cuts is sent once, and its reader waits for the second
send forever. That is refused too, unless the alloc is pinned with `air.memtile_col`, which the split
leaves alone (test placed_alloc_not_split).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Block
from .types import L2

MAX_LOCK_VALUE = (
    63  # AIE2 / AIE2P locks are 6-bit (mlir-aie AIE2TargetModel::getMaxLockValue)
)

_PURE = (
    "arith.",
    "affine.apply",
    "memref.subview",
    "memref.cast",
    "memref.expand_shape",
    "memref.collapse_shape",
)


@dataclass
class Refeeds:
    """What the pass writes: counts per carrier, and the loops it erases."""

    alloc_counts: dict = field(default_factory=dict)  # L2 root uid -> count
    put_counts: dict = field(default_factory=dict)  # id(put op) -> count
    sends: dict = field(
        default_factory=dict
    )  # id(put op) -> its erased loops' trips (either carrier)
    erased: set = field(default_factory=set)  # id(scf.for)
    where: dict = field(default_factory=dict)  # carrier key -> description of its puts
    problems: list = field(default_factory=list)  # (short, detail)


def _pure(op):
    return op.OPERATION_NAME.startswith(_PURE[0]) or op.OPERATION_NAME in _PURE[1:]


def _matches(loop, node, hoisted, put):
    """Whether `loop` is a refeed loop around `node` (the put, or the matched loop inside it), the ops
    in `hoisted` having been moved into its body by the inner matches."""
    if getattr(loop, "_emu_trip", None) is None or loop._emu_trip < 1:
        return False  # a dynamic trip count cannot become a lock init
    if loop.inner_iter_args:
        return False  # loop-carried values with a non-async put
    body = [o for o in loop.body.operations if not o._is_terminator]
    if node not in body:
        return False
    ops = [o for o in body if o is not node] + [o for o in hoisted if o is not put]
    if not all(_pure(o) for o in ops):
        return False
    inside = {loop.induction_variable._uid} | {a._uid for a in loop.inner_iter_args}
    for o in body + list(hoisted):
        inside |= {r._uid for r in o.results}
    if any(v._uid in inside for o in ops for v in o.operands):
        return False
    args = {loop.induction_variable._uid} | {a._uid for a in loop.inner_iter_args}
    return not any(v._uid in args for v in put.operands)


def annotate(w, where_of):
    """Refeeds of the design walked by `w` (resources._Walk); where_of(end) names an end."""
    r = Refeeds()
    for e in w.ends:
        if e.chan is None or e.direction != "mm2s":
            continue
        put, node, hoisted, n, matched = e.op, e.op, [e.op], 1, False
        for loop in reversed(e.loops):
            if not _matches(loop, node, hoisted, put):
                break
            matched = True
            r.erased.add(id(loop))
            n *= loop._emu_trip
            hoisted += [o for o in loop.body.operations if not o._is_terminator]
            node = loop
        if not matched or n <= 1:
            continue
        r.sends[id(put)] = n
        if e.level == L2:
            owner = e.side.memref.owner
            if isinstance(owner, Block) or owner.OPERATION_NAME != "memref.alloc":
                r.problems.append(
                    (
                        f"refeed: {where_of(e)}: no memref.alloc to carry the count",
                        f"{where_of(e)}: a refeed loop over an L2 source that is not a memref.alloc "
                        f'in scope: air-annotate-refeed fails ("air.refeed_count has no carrier the '
                        f'memtile lock allocator reads", AIRMiscPasses.cpp getRefeedCarrier)',
                    )
                )
                continue
            key = ("alloc", e.side.memref._uid)
            r.alloc_counts[e.side.memref._uid] = (
                r.alloc_counts.get(e.side.memref._uid, 0) + n
            )
        else:
            key = ("put", id(put))
            r.put_counts[id(put)] = n
        r.where.setdefault(key, []).append(f"{where_of(e)} x{n}")
    for key, puts in r.where.items():
        count = r.alloc_counts[key[1]] if key[0] == "alloc" else r.put_counts[key[1]]
        if count > MAX_LOCK_VALUE:
            carrier = "its L2 buffer" if key[0] == "alloc" else "the put"
            r.problems.append(
                (
                    f"refeed count {count} > {MAX_LOCK_VALUE}",
                    f"air.refeed_count = {count} on {carrier} ({'; '.join(puts)}): it becomes a lock's "
                    f"initial value and AIE2P locks hold {MAX_LOCK_VALUE} at most (6 bits, mlir-aie "
                    f"getMaxLockValue); refeed loops on one L2 buffer add up (air-annotate-refeed "
                    f"accumulateRefeed, test @counts_add). Send it in fewer trips, or from separate "
                    f"buffers of at most {MAX_LOCK_VALUE} sends each",
                )
            )
    return r
