# SPDX-License-Identifier: MIT
"""Reading what the real compiler decided, from the text it prints (int4awq/design/compiler.py runs it).

* AIR level (air-opt, aircc's pipeline stopped after a pass): the L2 buffers after `air-split-l2-memref`
  (a split buffer's alloc becomes one alloc per piece), the buffers `air-label-scf-for-to-ping-pong`
  doubles (it marks each `hoist_alloc = true`, and its loop `unroll = 2`), the L1 allocs
  `air-fuse-alloc-dealloc` sank into a loop, and the split pass's warning for a buffer it left whole.
* The runtime sequence (`aie.runtime_sequence` in aircc's npu.air.mlir): see runtime_sequence.py.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter

from . import compiler

# memref<8x1x32x512xbf16, 1 : i32>: shape, element type, memory space (absent: L3)
_MEMREF = re.compile(r"memref<((?:\d+x)*)(\w+)(?:, (\d) : i32)?>")
_ALLOC = re.compile(r"memref\.alloc\(\)(?: \{([^}]*)\})? : (memref<[^>]*>)")
SPLIT_WARNING = "memref splitting analysis failed to get the split dimension"


def memref_type(text: str) -> tuple[tuple[int, ...], str, int]:
    """(shape, element type, memory space) of a plain memref type's text."""
    m = _MEMREF.fullmatch(text)
    if not m:
        raise ValueError(f"not a plain memref type: {text}")
    shape = tuple(int(d) for d in m.group(1).split("x") if d)
    return shape, m.group(2), int(m.group(3) or 0)


@dataclasses.dataclass
class Alloc:
    type: str
    space: int  # 1 L2, 2 L1
    doubled: bool  # labelled for ping-pong (hoist_alloc = true)
    in_loop: bool  # inside an scf.for (sunk there by air-fuse-alloc-dealloc, or written there)
    herd: str | None  # the herd whose body holds it


def allocs(module_text: str) -> list[Alloc]:
    """Every memref.alloc of a printed AIR module, with where it sits (brace nesting of the text)."""
    out, stack = [], []
    for line in module_text.splitlines():
        s = line.strip()
        m = _ALLOC.search(s)
        if m:
            _, _, space = memref_type(m.group(2))
            herds = [h for kind, h in stack if kind == "herd"]
            out.append(
                Alloc(
                    m.group(2),
                    space,
                    "hoist_alloc = true" in (m.group(1) or ""),
                    any(kind == "for" for kind, _ in stack),
                    herds[-1] if herds else None,
                )
            )
        closes = s.startswith("}")
        if closes and stack:
            stack.pop()
        if s.endswith("{"):
            if "scf.for" in s:
                stack.append(("for", None))
            elif "air.herd @" in s:
                stack.append(("herd", re.search(r"air\.herd @(\w+)", s).group(1)))
            else:
                stack.append(("other", None))
    return out


@dataclasses.dataclass
class AirDecisions:
    """What aircc's AIR passes decided for one module."""

    l2_after_split: (
        Counter  # L2 alloc types after air-split-l2-memref (a piece per alloc)
    )
    doubled: (
        Counter  # (space, type) of the allocs air-label-scf-for-to-ping-pong doubles
    )
    labelled_loops: int  # loops labelled {unroll = 2}
    sunk_l1: Counter  # L1 alloc types inside a loop after air-fuse-alloc-dealloc
    split_warnings: int  # buffers the split pass could not split (left whole)

    def summary(self) -> str:
        l2 = ", ".join(f"{n} x {t}" for t, n in sorted(self.l2_after_split.items()))
        pp = (
            ", ".join(f"{n} x {t}" for (_, t), n in sorted(self.doubled.items()))
            or "none"
        )
        sunk = (
            ", ".join(f"{n} x {t}" for t, n in sorted(self.sunk_l1.items())) or "none"
        )
        return (
            f"L2 after split: {l2 or 'none'}"
            + (
                f" ({self.split_warnings} left whole: {SPLIT_WARNING})"
                if self.split_warnings
                else ""
            )
            + f"\n  ping-pong: {self.labelled_loops} loop(s) labelled, doubled: {pp}"
            + f"\n  L1 allocs sunk into a loop: {sunk}"
        )

    def doubled_by_level(self) -> dict[str, int]:
        """The doubled allocs keyed as the emulator records its own (emulator/air/emu/decisions.py):
        "L1 <type>" / "L2 <type>"."""
        return {
            f"{'L1' if space == 2 else 'L2'} {t}": n
            for (space, t), n in self.doubled.items()
        }


def disagreements(aircc: AirDecisions, emulator: dict) -> list[str]:
    """Where the emulator's decisions ({"l2": {type: n}, "doubled": {"L1 type": n}}, as
    air/emu/decisions.py records them) and aircc's passes differ, first disagreement first.
    """
    out = []
    if dict(aircc.l2_after_split) != emulator["l2"]:
        out.append(
            f"L2 split: aircc {dict(aircc.l2_after_split)}, emulator {emulator['l2']}"
        )
    if aircc.doubled_by_level() != emulator["doubled"]:
        out.append(
            f"ping-pong: aircc {aircc.doubled_by_level()}, emulator {emulator['doubled']}"
        )
    return out


def air_decisions(module_text: str, **pipeline_options) -> AirDecisions:
    """Run aircc's pipeline with air-opt to the split and to the ping-pong labelling, and read both."""
    split, log = compiler.run_air_pipeline(
        module_text, until="air-split-l2-memref", **pipeline_options
    )
    labelled, _ = compiler.run_air_pipeline(
        module_text, until="air-label-scf-for-to-ping-pong", **pipeline_options
    )
    after_label = allocs(labelled)
    return AirDecisions(
        l2_after_split=Counter(a.type for a in allocs(split) if a.space == 1),
        doubled=Counter((a.space, a.type) for a in after_label if a.doubled),
        labelled_loops=labelled.count("{unroll = 2 : i32}"),
        sunk_l1=Counter(a.type for a in after_label if a.space == 2 and a.in_loop),
        split_warnings=log.count(SPLIT_WARNING),
    )


# -- the placed, routed design (aiecc's input_physical.mlir) -----------------------------------------------

_TILE = re.compile(r"(%\w+) = aie\.tile\((\d+), (\d+)\)")
_LOCK = re.compile(r"aie\.lock\((%\w+), (\d+)\)(?: \{init = (\d+) : i32\})?")
_BUFFER = re.compile(
    r"aie\.buffer\((%\w+)\) \{address = (\d+) : i32[^}]*\} : (memref<[^>]*>)"
)
_DMA_BLOCK = re.compile(r"= aie\.(mem|memtile_dma)\((%\w+)\) \{")
_CORE = re.compile(r"= aie\.core\((%\w+)\) \{")
_DMA_START = re.compile(r"aie\.dma_start\((S2MM|MM2S), (\d+),")
_BD_ID = re.compile(r"aie\.dma_bd\(.*\{bd_id = (\d+) : i32")
_STACK = re.compile(r"stack_size = (\d+) : i32")
_SHIM_ALLOC = re.compile(r"aie\.shim_dma_allocation @\w+\((%\w+), (MM2S|S2MM), (\d+)\)")
ELEM_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "i8": 1, "i16": 2, "i32": 4, "f64": 8}


@dataclasses.dataclass
class TileUse:
    """One tile of the compiled design, as aiecc placed and routed it."""

    col: int
    row: int
    s2mm: set = dataclasses.field(default_factory=set)  # DMA channel numbers in use
    mm2s: set = dataclasses.field(default_factory=set)
    bd_ids: list = dataclasses.field(default_factory=list)
    locks: int = 0
    largest_lock_init: int = 0
    buffers: list = dataclasses.field(default_factory=list)  # (address, bytes, type)
    core: bool = False  # a compute tile with a core (aie.core)
    stack: int | None = None  # the core's stack_size attribute, when aircc sets one

    @property
    def kind(self) -> str:
        return {0: "shim", 1: "memtile"}.get(self.row, "compute")

    @property
    def top(self) -> int:
        """The highest byte any buffer reaches (aiecc's addresses; L1 overflow is its error)."""
        return max((a + n for a, n, _ in self.buffers), default=0)

    @property
    def bds_by_parity(self) -> tuple[int, int]:
        """Memtile BD ids 0-23 serve even channels, 24-47 odd ones (mlir-aie BdIdGenerator)."""
        return (
            sum(1 for b in self.bd_ids if b < 24),
            sum(1 for b in self.bd_ids if b >= 24),
        )


def tile_resources(physical_text: str) -> dict[tuple[int, ...], TileUse]:
    """(column, row) -> TileUse of every tile in aiecc's input_physical.mlir; with several aie.device ops
    (a multi-launch module: one device per launch, each configured in turn), (device, column, row), each
    device's tiles counted apart, as the launches hold them one after another."""
    blocks = re.split(r"(?m)^(?=\s*aie\.device\()", physical_text)
    devices = [b for b in blocks if b.lstrip().startswith("aie.device(")]
    if len(devices) > 1:
        return {
            (d, *key): use
            for d, block in enumerate(devices)
            for key, use in _device_tiles(block).items()
        }
    return _device_tiles(physical_text)


def _device_tiles(physical_text: str) -> dict[tuple[int, int], TileUse]:
    """tile_resources of one device's text."""
    names, tiles = {}, {}
    for m in _TILE.finditer(physical_text):
        names[m.group(1)] = tiles.setdefault(
            (int(m.group(2)), int(m.group(3))),
            TileUse(int(m.group(2)), int(m.group(3))),
        )
    for m in _LOCK.finditer(physical_text):
        t = names[m.group(1)]
        t.locks += 1
        t.largest_lock_init = max(t.largest_lock_init, int(m.group(3) or 0))
    for m in _BUFFER.finditer(physical_text):
        shape, elem, _ = memref_type(m.group(3))
        n = ELEM_BYTES[elem]
        for d in shape:
            n *= d
        names[m.group(1)].buffers.append((int(m.group(2)), n, m.group(3)))
    for m in _SHIM_ALLOC.finditer(physical_text):
        t = names[m.group(1)]
        (t.s2mm if m.group(2) == "S2MM" else t.mm2s).add(int(m.group(3)))
    current, core = None, None
    for line in physical_text.splitlines():
        m = _DMA_BLOCK.search(line)
        if m:
            current = names[m.group(2)]
            continue
        m = _CORE.search(line)
        if m:
            core = names[m.group(1)]
            core.core = True
            continue
        if current is not None:
            s = _DMA_START.search(line)
            if s:
                (current.s2mm if s.group(1) == "S2MM" else current.mm2s).add(
                    int(s.group(2))
                )
            b = _BD_ID.search(line)
            if b:
                current.bd_ids.append(int(b.group(1)))
            if line.startswith("    }"):
                current = None
        elif core is not None and line.startswith("    }"):
            st = _STACK.search(line)
            core.stack = int(st.group(1)) if st else None
            core = None
    return tiles
