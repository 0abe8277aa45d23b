# SPDX-License-Identifier: MIT
"""air-split-l2-memref as aircc runs it (mlir-air at e972f29), for the resource model.

aircc splits an L2 buffer of a segment with more than 4 compute tiles into pieces, one per endpoint of
its fan-out side, each piece a memtile buffer of its own. The decision and the rewrite below follow the
pass step by step (AIRMiscPasses.cpp, AIRSplitL2MemrefForBufferConstraintPass; Util.cpp):

* qualifying segments: more than tiles-per-l2-tile = 4 compute tiles, same-named herds counted once
  (runOnOperation ~2556-2582); when one segment of the function qualifies, every L2 alloc of it is a
  candidate (getTargetMemrefAllocs ~2097-2101);
* not split: an alloc with `air.no_split` (~2181-2186) or an integer `air.memtile_col` (~2199-2200), an
  alloc with a user that is not a channel op after air-dma-to-channel (a subview, a kernel argument,
  ~2214-2220), one endpoint on each side (~2247), unequal endpoint counts on both sides (~2250), a single
  side whose other end is inside a herd (~2262-2291), a split that would push the launch's L3 channel
  endpoints in one direction past 2 per column (aircc's cap, ~2304-2366), no dimension on which the
  fan-out endpoints' offsets differ, or no memref dimension with that offset's stride (~2387);
* endpoints: the L2-side ops air-dma-to-channel leaves in the segment, counted as distinct (channel,
  indices). A herd's DMA becomes one channel per broadcast group (air-specialize-dma-broadcast) when it
  reads or writes the same bytes for all PEs along a herd dimension, else one channel over the herd
  whose segment side is an scf.parallel that the pass unrolls along its first dimension only
  (~2620-2636): a 2-D herd whose PEs all touch different bytes counts herd_x endpoints;
* the split dimension: the offset position where the fan-out endpoints differ, mapped to the memref
  dimension whose row-major stride equals that position's stride exactly (getMemrefSplitDim ~2051,
  Util.cpp getMemrefDimFromOffsetDim); factor = the endpoint count;
* each fan-out op is rebased into its piece by the offset at its first pattern position of the split
  stride (getOffsetDimFromMemrefDim, exact stride match; no match is undefined behaviour in the pass:
  refused here);
* the single side (e.g. the fill from L3) is tiled into `factor` copies at its first pattern position
  of the split stride, falling back to the memref dimension's index when none has it (~2741-2743), with
  size ceil(extent / factor); its other end (the L3 side) is brought to the same rank (~2785-2822) and
  tiled at the same position by its own size there (~2852-2855);
* both read as `canonicalize` (run before the pass) leaves them: a pattern that covers its whole memref
  in row-major order is emptied to `[] [] []` (AIRDialect.cpp canonicalizeEmptyLists ~2364-2381,
  isDefaultDataAccessPattern ~2307-2335, isVolumeEqualToMemrefVolume ~2340-2362), and the pass rebuilds
  an empty one from the memref's shape (Util.cpp populateDefaultWrapsAndStrides ~1981-1997;
  AIRMiscPasses.cpp ~2767-2772, ~2778-2780), an empty single side tiled at the memref dimension's index.
  A whole-buffer DDR pattern written in another form than the memref's (a 4-D drain to a 2-D C) is so
  bumped from the 2-D shape: with a size-1 dimension ahead of the split one (M = 1, herd x second) the
  tiled position lands on that size-1 dimension and every piece gets the whole buffer (refused);
* pieces: one per distinct key, shaped by the first op of the memref's rank (partitionMemref
  ~1892-1925), the full shape when none has it.

The model then checks what the rewrite computes against what the design meant: every piece must hold
exactly the elements its readers read and its writers write, and each tiled copy of the single side
must move the same elements, in the same order, between the same addresses as the original transfer
did for that piece. Where it does not (the fallback above on a fill that re-lays its L2 side, for
instance), the design is refused with the buffer, the pattern and the reason: on NPU2 it would compute
wrong results or hang, silently.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from ..ir import Block
from . import patterns as P
from .budget import _walk_all
from .types import L3, np_dtype

TILES_PER_L2_TILE = (
    4  # Passes.td, air-split-l2-memref tiles-per-l2-tile (aircc never sets it)
)
LAUNCH_CHANNELS_PER_COLUMN = (
    2  # aircc.cpp: max-launch-channels-{mm2s,s2mm} = columns * 2
)


def aircc_columns(target_device: str, num_device_cols: int = 0) -> int:
    """The column count aircc derives from the device name XRTBackend passes (`<target>_<n>col` when
    num_device_cols is set; aircc.cpp ~1001-1011): npu1* and npu2_4col 4, any other npu2* 8 (npu2_3col
    included: aircc matches names, not counts), else 10."""
    device = (
        f"{target_device}_{num_device_cols}col" if num_device_cols else target_device
    )
    if "npu1" in device or device == "npu2_4col":
        return 4
    return 8 if "npu2" in device else 10


@dataclass
class Pattern:
    """One side's access pattern as integers, full length (offsets padded with leading zeros)."""

    offsets: list
    sizes: list
    strides: list

    def addresses(self):
        base = sum(o * s for o, s in zip(self.offsets, self.strides))
        idx = np.zeros(1, dtype=np.int64) + base
        for size, stride in zip(self.sizes, self.strides):
            idx = (
                idx[:, None] + np.arange(size, dtype=np.int64)[None, :] * stride
            ).ravel()
        return idx

    def text(self):
        return f"sizes {self.sizes} strides {self.strides}"

    def dims(self):
        return P.canonical(self.sizes, self.strides)


@dataclass
class Endpoint:
    """One L2-side op after air-dma-to-channel: an end and the PEs (envs) it stands for."""

    end: object
    envs: list
    pattern: Pattern  # at the representative PE and loop indices 0


@dataclass
class Decision:
    """What the pass does to one L2 buffer."""

    factor: int = 1
    dim: int | None = None
    note: str = ""
    piece_bytes: int = 0
    pinned: int | None = None  # air.memtile_col
    # id(end) -> {env key: piece}: the piece each copy of a fan-out end lands in
    piece_of: dict = field(default_factory=dict)
    # id(end) -> [canonical dims of each piece's copy]: the tiled single side (and its L3 partner)
    tiled: dict = field(default_factory=dict)
    # (piece shape, count) aircc makes, set once the pieces are known, also when the model then refuses
    # the split as moving the wrong data (the buffer is then counted whole)
    pieces: tuple | None = None

    @property
    def split(self):
        return self.factor > 1


class Refusal(Exception):
    """The split as the pass makes it moves the wrong data: (short, long) reason."""

    def __init__(self, short, detail):
        super().__init__(detail)
        self.short, self.detail = short, detail
        self.pieces = (
            None  # (piece shape, count) when the pass gets as far as cutting the buffer
        )


def partners(w, end):
    """The other ends of `end`'s stream (w: resources._Walk): the other side of its DMA, or the ops of
    the other direction on its channel."""
    if end.chan is None:
        return [e for e in w.ends if e.op is end.op and e is not end]
    return [e for e in w.ends if e.chan == end.chan and e.direction != end.direction]


def _launch_of(end):
    return next((h for h in end.hier if h.OPERATION_NAME == "air.launch"), None)


def _row_major(shape):
    rs = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        rs[d] = rs[d + 1] * shape[d + 1]
    return rs


def env_key(env):
    return tuple(sorted(env.items()))


class SplitModel:
    """air-split-l2-memref over one function: call decide() per L2 buffer in program order."""

    def __init__(self, w, segment_tiles, columns=8):
        """columns: aircc's column count for the device (aircc_columns), which caps the launch."""
        self.w = w
        # the pass splits the L2 allocs of the segments with more than 4 compute tiles only
        # (AIRMiscPasses.cpp ~2576-2600: segmentsNeedingSplit, then their allocs)
        self.qualifying = {
            sid for sid, n in segment_tiles.items() if n > TILES_PER_L2_TILE
        }
        self.cap = LAUNCH_CHANNELS_PER_COLUMN * columns
        # L3 ends (the launch-level channel endpoints) and the factor committed on each
        self.launch = {id(e): 1 for e in w.ends if e.level == L3}

    # ------------------------------------------------------------------------------ patterns
    def pattern(self, end, env):
        side, w = end.side, self.w
        if side.implicit:
            shape = side.memref.type.shape or [1]
            return Pattern([0] * len(shape), list(shape), _row_major(shape))
        sizes = [w.value(s, env) if not isinstance(s, int) else s for s in side.sizes]
        strides = [
            w.value(s, env) if not isinstance(s, int) else s for s in side.strides
        ]
        offs = [w.value(o, env) if not isinstance(o, int) else o for o in side.offsets]
        offs = [0] * (len(sizes) - len(offs)) + offs
        return Pattern(offs, sizes, strides)

    def _envs(self, end):
        """The PEs of end's herd: (envs, herd id uids, herd sizes)."""
        sizes = next(s for op, s in self.w.compiler.herd_ops if op is end.herd)
        ids = [a._uid for a in end.herd.ids]
        return (
            [
                dict(zip(ids, pe))
                for pe in itertools.product(*[range(s) for s in sizes])
            ],
            ids,
            sizes,
        )

    def endpoints(self, ends):
        """The L2-side ops air-dma-to-channel leaves for `ends` (one direction), after the pass's
        unrolling: [Endpoint]."""
        out, seen = [], {}
        for e in ends:
            if e.herd is None:
                key = e.key(self.w)
                if (
                    key in seen
                ):  # the same channel and indices: one endpoint, time-multiplexed
                    seen[key].envs.append({})
                    continue
                ep = Endpoint(e, [{}], self.pattern(e, {}))
                seen[key] = ep
                out.append(ep)
                continue
            envs, ids, sizes = self._envs(e)
            pats = [self.pattern(e, env) for env in envs]
            groups = {}
            for env, p in zip(envs, pats):
                groups.setdefault(tuple(p.offsets), []).append(env)
            big = [d for d, s in enumerate(sizes) if s > 1]
            dep = [
                d
                for d in big
                if any(
                    self.pattern(e, {**env, ids[d]: env[ids[d]] + 1}).offsets
                    != self.pattern(e, env).offsets
                    for env in envs
                    if env[ids[d]] + 1 < sizes[d]
                )
            ]
            if len(big) == 2 and dep == big:
                # one channel over the herd: its segment-side scf.parallel is unrolled along the
                # herd's first dimension only, so one endpoint per x, standing for its column of PEs
                for xv in range(sizes[0]):
                    col = [env for env in envs if env[ids[0]] == xv]
                    out.append(Endpoint(e, col, self.pattern(e, col[0])))
            else:  # a channel per broadcast group (or a 1-D herd, fully unrolled)
                for envs_g in groups.values():
                    out.append(Endpoint(e, envs_g, self.pattern(e, envs_g[0])))
        return out

    # ------------------------------------------------------------------------------ the decision
    def decide(self, root, ends):
        """The Decision for the L2 buffer `root` with its L2-side `ends`; Refusal when the split it
        makes would move the wrong data."""
        alloc = root.owner
        nbytes = root.type.num_elements * np_dtype(root.type.element_type).itemsize
        d = Decision(piece_bytes=nbytes)
        attrs = {} if isinstance(alloc, Block) else alloc.attributes
        if "air.memtile_col" in attrs:
            col = getattr(attrs["air.memtile_col"], "value", None)
            if isinstance(col, int) and not isinstance(col, bool):
                d.pinned = col
                d.note = f"not split: air.memtile_col = {col} pins it to memtile {col}"
                return d
        segment = next((e.segment for e in ends if e.segment is not None), None)
        if id(segment) not in self.qualifying:
            d.note = f"not split: its segment has no more than {TILES_PER_L2_TILE} compute tiles"
            return d
        if "air.no_split" in attrs:
            d.note = "not split: air.no_split"
            return d
        other = self._non_channel_user(root, ends)
        if other:
            d.note = f"not split: {other} is not a channel op after air-dma-to-channel"
            return d
        mm2s = self.endpoints([e for e in ends if e.direction == "mm2s"])
        s2mm = self.endpoints([e for e in ends if e.direction == "s2mm"])
        n_mm, n_s2 = len(mm2s), len(s2mm)
        if n_mm <= 1 and n_s2 <= 1:
            d.note = "not split: one endpoint on each side"
            return d
        if n_mm > 1 and n_s2 > 1 and n_mm != n_s2:
            d.note = f"not split: {n_s2} writers and {n_mm} readers"
            return d
        factor = max(n_mm, n_s2)
        multi = (mm2s if n_mm > 1 else []) + (s2mm if n_s2 > 1 else [])
        single = s2mm if n_s2 == 1 else (mm2s if n_mm == 1 else [])
        if single and any(
            e.herd is not None
            for e in [single[0].end] + partners(self.w, single[0].end)
        ):
            d.note = "not split: its single side is inside a herd"
            return d
        links = [self._partner(s.end) for s in single]
        if any(p is not None and p.level == L3 for p in links):
            direction = links[0].direction
            # the cap is a launch's: each launch is a device of its own
            here = _launch_of(links[0])
            total = sum(
                f
                for e in self.w.ends
                if e.level == L3 and e.direction == direction and _launch_of(e) is here
                for f in [self.launch[id(e)]]
            )
            now = sum(self.launch[id(p)] for p in links)
            hyp = total - now + factor * len(links)
            if hyp > self.cap:
                d.note = (
                    f"not split (factor {factor}): it would take the launch's {direction.upper()} "
                    f"endpoints from {total} to {hyp} (cap {self.cap})"
                )
                return d
        shape = list(root.type.shape)
        rs = _row_major(shape)
        pos = self._differing_position(multi)
        if pos is None:
            d.note = "not split: no offset on which its endpoints differ"
            return d
        first = multi[0].pattern
        dim = next((i for i, s in enumerate(rs) if s == first.strides[pos]), None)
        if dim is None:
            d.note = (
                f"not split: no memref dimension of {root.type} has the stride "
                f"{first.strides[pos]} of the offset its endpoints differ in"
            )
            return d
        try:
            self._rewrite(d, root, shape, rs, dim, factor, multi, single, links)
        except Refusal as r:
            r.pieces = d.pieces
            raise
        finally:
            # aircc makes the split whether or not the model refuses it: its L3 side takes the channels
            for p in links:
                if p is not None and p.level == L3:
                    self.launch[id(p)] = factor
        return d

    def _partner(self, end):
        others = partners(self.w, end)
        return others[0] if len(others) == 1 else None

    def _mixed_offset(self, ep, pos):
        """The affine.apply giving `ep`'s offset at pattern position `pos` when it takes both a herd id
        the split's unroll makes constant and another value (None otherwise)."""
        side, end = ep.end.side, ep.end
        if side.implicit or end.herd is None:
            return None
        i = pos - (len(side.sizes) - len(side.offsets))
        v = side.offsets[i] if 0 <= i < len(side.offsets) else 0
        o = getattr(v, "owner", None)
        if o is None or isinstance(o, Block) or o.OPERATION_NAME != "affine.apply":
            return None
        # the herd ids the unroll fixes: those all of the endpoint's PEs share
        fixed = {
            a._uid
            for d, a in enumerate(end.herd.ids)
            if len({env.get(a._uid) for env in ep.envs}) == 1
        }
        kinds = {x._uid in fixed for x in self._leaves(v)}
        return o if kinds == {True, False} else None

    def _leaves(self, v):
        """The values an offset depends on once canonicalize has run: through affine.apply chains,
        without constants and the counters of one-trip loops (folded away before the split).
        """
        o = v.owner
        if isinstance(o, Block):
            loop = self.w.loop_of_iv.get(v._uid)
            return (
                []
                if loop is not None and getattr(loop, "_emu_trip", None) == 1
                else [v]
            )
        if o.OPERATION_NAME == "affine.apply":
            return [x for y in o.operands for x in self._leaves(y)]
        if o.OPERATION_NAME == "arith.constant":
            return []
        return [v]

    def _non_channel_user(self, root, ends):
        """A use of the buffer other than a DMA or channel op (dealloc and hierarchy operands
        forwarding it are fine), or None."""
        w = self.w
        transfer = {id(e.op) for e in ends}
        values = {root._uid}
        ops = list(_walk_all(w.compiler.entry.entry_block))
        live = {v._uid for op in ops for v in op.operands}
        for op in ops:
            name = op.OPERATION_NAME
            used = [v for v in op.operands if v._uid in values]
            if not used:
                continue
            # a subview is no user of its own: a dead one is gone before the split (canonicalize,
            # which aircc runs first), and a DMA through one is a channel op on the buffer after
            # air-dma-to-channel, the view folded into its pattern (air-opt shows both split)
            if name == "memref.subview":
                values.update(r._uid for r in op.results if r._uid in live)
                continue
            if name in ("air.launch", "air.segment", "air.herd"):
                for a, v in zip(op.kernel_arguments, op.kernel_operands):
                    if v._uid in values:
                        values.add(a._uid)
                continue
            if name == "memref.dealloc" or id(op) in transfer:
                continue
            return f"{name} at {op._loc}"
        return None

    @staticmethod
    def _differing_position(multi):
        """The offset position of the last pair of endpoints whose offsets differ (getMemrefSplitDim)."""
        pos = None
        for a, b in itertools.combinations(multi, 2):
            oa, ob = a.pattern.offsets, b.pattern.offsets
            if len(oa) != len(ob):
                continue
            for i, (x, y) in enumerate(zip(oa, ob)):
                if x != y:
                    pos = i
                    break
        return pos

    # ------------------------------------------------------------------------------ the rewrite
    def _rewrite(self, d, root, shape, rs, dim, factor, multi, single, links):
        name = f"L2 buffer {root.type}"
        split_stride = rs[dim]
        extent = shape[dim]
        # the fan-out ops: keyed by their offset at the first position of the split stride
        keys = {}
        for ep in multi:
            p = ep.pattern
            pos = next((i for i, s in enumerate(p.strides) if s == split_stride), None)
            if pos is None:
                raise Refusal(
                    f"split of {name}: no stride {split_stride} in {ep.end.where()}",
                    f"{ep.end.where()}: air-split-l2-memref splits the {name} along dimension {dim} "
                    f"(stride {split_stride}), but this access ({p.text()}) has no dimension of that "
                    f"stride to rebase into its piece (AIRMiscPasses.cpp dereferences the missing "
                    f"dimension: undefined behaviour). Give the access a dimension of stride "
                    f"{split_stride}, or keep the buffer whole with air.no_split",
                )
            mixed = self._mixed_offset(ep, pos)
            if mixed is not None:
                raise Refusal(
                    f"split of {name}: {ep.end.where()} offsets by an affine.apply of the herd id "
                    f"and other values",
                    f"{ep.end.where()}: air-split-l2-memref splits the {name} along dimension {dim} "
                    f"and unrolls the herd's transfers into one per piece, which turns the herd id "
                    f"into a constant inside the affine.apply at {mixed._loc} that also takes other "
                    f'values; the pass then stops with "found constant operands to affine map, which '
                    f"aren't canonicalized away\" (AIRMiscPasses.cpp ~1999-2006). Index that dimension "
                    f"by the herd id alone (the offset of the other values in another dimension), "
                    f"or keep the buffer whole with air.no_split",
                )
            keys.setdefault(p.offsets[pos], []).append(ep)
        # the single side: `factor` tiled copies, and the same for its other end
        single_copies = {}
        for ep, partner in zip(single, links):
            # as canonicalize leaves it: emptied (then the memref's default) when it is the whole
            # buffer in row-major order; an empty one is tiled at the memref dimension (~2741-2743)
            p, emptied = canonical(ep.pattern, shape)
            pos = (
                dim
                if emptied
                else next(
                    (i for i, s in enumerate(p.strides) if s == split_stride), dim
                )
            )
            copies = [_tile(p, pos, extent, factor, i) for i in range(factor)]
            pcopies = canon = None
            if partner is not None:
                written = self.pattern(partner, {})
                pp, p_emptied = canonical(written, partner.side.memref.type.shape)
                # canonicalize changed the form the pass bumps: (as written, as rebuilt, bumped)
                changed = (written.sizes, written.strides) != (pp.sizes, pp.strides)
                if p_emptied and not partner.side.implicit and changed:
                    canon = (written, pp)
                pp = _bump(pp, p.sizes)
                if pos >= len(pp.sizes):
                    raise Refusal(
                        f"split of {name}: {partner.where()} cannot be tiled like its other side",
                        f"{partner.where()}: air-split-l2-memref tiles the {name} at pattern "
                        f"position {pos} and this side of the transfer ({pp.text()}) has no such "
                        f"position after the pass matches its rank (AIRMiscPasses.cpp ~2785-2855)",
                    )
                pcopies = [
                    _tile(pp, pos, pp.sizes[pos], factor, i) for i in range(factor)
                ]
                if canon is not None:
                    canon += (pp,)
            single_copies[id(ep.end)] = (ep, partner, pos, copies, pcopies, canon)
            for c in copies:
                keys.setdefault(c.offsets[pos], [])
        order = sorted(keys)
        if len(order) != factor:
            raise Refusal(
                f"split of {name}: {len(order)} pieces for factor {factor}",
                f"air-split-l2-memref would cut the {name} into {len(order)} buffers for {factor} "
                f"endpoints: the fan-out offsets {order} and the tiled single side do not line up "
                f"(AIRMiscPasses.cpp partitionMemref keys each op by its offset)",
            )
        # piece shape: the first op of the memref's rank in each key (else the whole shape)
        same_rank = [ep.pattern for ep in multi if len(ep.pattern.sizes) == len(shape)]
        same_rank += [
            c
            for (_, _, _, cs, _, _) in single_copies.values()
            for c in cs
            if len(c.sizes) == len(shape)
        ]
        if same_rank:
            first = same_rank[0]
            at = (
                first.strides.index(split_stride)
                if split_stride in first.strides
                else dim
            )
            piece_extent = first.sizes[at]
        else:
            piece_extent = extent
        item = np_dtype(root.type.element_type).itemsize
        d.piece_bytes = root.type.num_elements // extent * piece_extent * item
        # what aircc makes, whether or not the model then refuses it
        d.pieces = (shape[:dim] + [piece_extent] + shape[dim + 1 :], factor)
        # check: every op stays inside its piece, and the tiled single side moves what it moved
        for ep in multi:
            p = ep.pattern
            pos = next(i for i, s in enumerate(p.strides) if s == split_stride)
            k = p.offsets[pos]
            for env in ep.envs:
                addrs = self.pattern(ep.end, env).addresses()
                if piece_extent < extent:
                    idx = (addrs // split_stride) % extent
                    lo = k
                    if idx.min() < lo or idx.max() >= lo + piece_extent:
                        raise Refusal(
                            f"split of {name}: {ep.end.where()} leaves its piece",
                            f"{ep.end.where()}: air-split-l2-memref cuts the {name} into {factor} "
                            f"pieces of {piece_extent} along dimension {dim}, and this access "
                            f"({p.text()}) reaches indices {int(idx.min())}..{int(idx.max())} of that "
                            f"dimension from its piece at {lo}: it would read or write another "
                            f"piece's memory",
                        )
            d.piece_of.setdefault(id(ep.end), {})
            for env in ep.envs:
                d.piece_of[id(ep.end)][env_key(env)] = order.index(k)
        for ep, partner, pos, copies, pcopies, canon in single_copies.values():

            def refuse(short, copy, pcopy):
                detail = self._mismatch(
                    name, ep, partner, pos, dim, split_stride, copy, pcopy, piece_extent
                )
                return Refusal(f"split of {name}: {short}", detail)

            orig = ep.pattern.addresses()
            # its addresses, sorted, and which partner element each moves to (the last, if repeated)
            keys_, last = np.unique(orig[::-1], return_index=True)
            if partner is not None:
                porig = self.pattern(partner, {}).addresses()
                partner_of = porig[len(orig) - 1 - last]
            for i, c in enumerate(copies):
                a = c.addresses()
                if piece_extent < extent:
                    idx = (a // split_stride) % extent
                    k = c.offsets[pos]
                    inside = k <= idx.min() and idx.max() < k + piece_extent
                    if not inside or not _found(keys_, a)[0].all():
                        raise refuse(
                            f"the {ep.end.direction.upper()} side {ep.pattern.text()} is tiled "
                            "off its pieces",
                            c,
                            None,
                        )
                if partner is None:
                    continue
                b = pcopies[i].addresses()
                if len(a) != len(b) or not _maps_to(keys_, partner_of, a, b):
                    if canon is not None:
                        raise self._emptied(
                            name,
                            ep,
                            partner,
                            pos,
                            dim,
                            split_stride,
                            factor,
                            i,
                            canon,
                            c,
                            pcopies[i],
                            porig,
                        )
                    raise refuse(
                        f"the two sides of {ep.end.where()} disagree ({len(b)} vs {len(a)} "
                        "elements per piece)",
                        c,
                        pcopies[i],
                    )
            d.tiled[id(ep.end)] = list(copies)
            if partner is not None:
                d.tiled[id(partner)] = list(pcopies)
        d.factor, d.dim = factor, dim
        d.note = (
            f"split along dimension {dim} into {factor} pieces of {d.piece_bytes} bytes"
            + (
                ""
                if piece_extent < extent
                else " (each keeps the whole shape: no op has its rank)"
            )
        )

    @staticmethod
    def _emptied(
        name, ep, partner, pos, dim, split_stride, factor, i, canon, copy, pcopy, porig
    ):
        """The Refusal for an L3 side that canonicalize emptied and the split re-tiled wrongly."""
        written, default, bumped = canon
        side = "L3" if partner.level == L3 else "other"
        ptype = partner.side.memref.type
        b = pcopy.addresses()
        whole = len(b) == len(porig)
        gets = (
            f"the whole {side} buffer {ptype}" if whole else f"{len(b)} {side} elements"
        )
        moves = (
            f"the {factor} pieces {'write' if ep.end.direction == 'mm2s' else 'read'} every "
            f"element of it {factor} times"
            if whole
            else "the pieces move the wrong data"
        )
        short = (
            f"split of {name}: each of its {factor} pieces gets {gets} from "
            f"{partner.where()} ({len(copy.addresses())} its own)"
        )
        detail = (
            f"{partner.where()}: its pattern ({written.text()}) is the whole {ptype} in row-major "
            f"order, so canonicalize, which aircc runs before air-split-l2-memref, empties it to "
            f"[] [] [] (mlir-air e972f29 AIRDialect.cpp canonicalizeEmptyLists ~2364-2381, "
            f"isDefaultDataAccessPattern ~2307-2335, isVolumeEqualToMemrefVolume ~2340-2362). "
            f"air-split-l2-memref splits the {name} along dimension {dim} (stride {split_stride}) "
            f"into {factor} pieces; it rebuilds that side from the memref's shape ({default.text()}: "
            f"AIRMiscPasses.cpp ~2764-2772, Util.cpp populateDefaultWrapsAndStrides ~1981-1997), "
            f"brings it to the rank of this transfer's L2 side ({ep.pattern.text()}) around the L2 "
            f"side's sizes ({bumped.text()}, AIRMiscPasses.cpp ~2785-2822) and tiles it at the L2 "
            f"side's first position of the split stride, {pos} (~2741-2743), by its own size there, "
            f"{bumped.sizes[pos]} (~2852-2855; tileChannelOpByFactor ~1554-1761): piece {i} gets "
            f"offsets {pcopy.offsets} {pcopy.text()}, {gets} (that position is not the split "
            f"dimension on this side), where its part is {len(copy.addresses())} elements "
            f"({copy.text()}). On NPU2 {moves}. Put the split dimension first in both patterns "
            f"(as the GEMV's C drain does since 8d08a5b, [hx, m, hy, tn] on both sides, and the "
            f"GEMM's C), so the {side} pattern is not the plain row-major buffer and keeps its "
            f"form, or keep the buffer whole with air.no_split"
        )
        return Refusal(short, detail)

    @staticmethod
    def _mismatch(name, ep, partner, pos, dim, split_stride, copy, pcopy, piece_extent):
        how = (
            f"its pattern position {pos} has that stride"
            if ep.pattern.strides[pos] == split_stride
            else f"its pattern ({ep.pattern.text()}) has no dimension of that stride, so the pass "
            f"falls back to pattern position {pos} (AIRMiscPasses.cpp ~2741-2743)"
        )
        sides = (
            f"; its other side {partner.where()} is tiled by its own size there: each piece then "
            f"gets {len(pcopy.addresses())} elements from the {('L3' if partner.level == L3 else 'other')} "
            f"side ({pcopy.text()}) and {len(copy.addresses())} on the L2 side ({copy.text()})"
            if pcopy is not None
            else ""
        )
        return (
            f"{ep.end.where()}: air-split-l2-memref splits the {name} along dimension {dim} "
            f"(stride {split_stride}, pieces of {piece_extent}) and tiles this transfer's L2 side: "
            f"{how}{sides}. On NPU2 that moves the wrong data or hangs. Fill the buffer with a plain "
            f"pattern (no re-layout on the L2 side; re-lay on the read to L1, as mlir-air's "
            f"bf16_x_bfp16 GEMM does), or keep it whole with air.no_split"
        )


def canonical(p, shape):
    """`p` on a memref of `shape` as canonicalize leaves it and the split reads it: (pattern, emptied).
    A pattern that is the default row-major access of the whole memref is emptied to [] [] []
    (AIRDialect.cpp canonicalizeEmptyLists ~2364-2381), and the split rebuilds an empty one from the
    memref's shape (Util.cpp populateDefaultWrapsAndStrides ~1981-1997)."""
    shape = list(shape) or [1]
    if not _default_access(p.sizes, p.strides) or math.prod(p.sizes) != math.prod(
        shape
    ):
        return p, False
    return Pattern([0] * len(shape), shape, _row_major(shape)), True


def _default_access(sizes, strides) -> bool:
    """isDefaultDataAccessPattern (AIRDialect.cpp ~2307-2335): innermost first, each stride the product
    of the sizes inside it (a size-1 dimension of stride 0 skipped); offsets are not looked at.
    """
    if len(sizes) != len(strides):
        return False
    if not sizes or (len(sizes) == 1 and strides[0] == 1):
        return True
    factor = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size == 1 and stride == 0:
            continue
        if stride != factor:
            return False
        factor *= size
    return True


def _found(keys, a):
    """(which addresses of a are among keys, sorted and unique; where they are in keys)."""
    if not len(keys):
        return np.zeros(len(a), bool), np.zeros(len(a), int)
    at = np.searchsorted(keys, a).clip(max=len(keys) - 1)
    return keys[at] == a, at


def _maps_to(keys, partner_of, a, b) -> bool:
    """Every address of a is among keys and moves to the element of b that partner_of says."""
    found, at = _found(keys, a)
    return bool(np.all(found & (partner_of[at] == b))) if len(keys) else not len(a)


def _tile(p, pos, size, factor, i):
    """Copy i of `factor` of a pattern tiled at position pos (tileChannelOpByFactor)."""
    step = -(-size // factor)
    offs, sizes = list(p.offsets), list(p.sizes)
    offs[pos] = offs[pos] + i * step
    sizes[pos] = step
    return Pattern(offs, sizes, list(p.strides))


def _bump(p, ref_sizes):
    """The other side brought to the single side's rank (AIRMiscPasses.cpp ~2785-2822)."""
    offs, sizes, strides = list(p.offsets), list(p.sizes), list(p.strides)
    if len(sizes) >= len(ref_sizes):
        return p
    cur = len(offs) - 1
    for r in reversed(ref_sizes):
        if r == 1:
            offs.insert(cur, 0)
            sizes.insert(cur, 1)
            strides.insert(cur, strides[cur])
            continue
        if sizes[cur] == r:
            cur = max(cur - 1, 0)
            continue
        if sizes[cur] % r:
            break
        f = sizes[cur] // r
        offs.insert(cur, 0)
        sizes.insert(cur, f)
        strides.insert(cur, r * strides[cur])
        sizes[cur + 1] = r
    return Pattern(offs, sizes, strides)
