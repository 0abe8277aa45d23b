# SPDX-License-Identifier: MIT
"""The host aie_api's profiling build (-DAIE_HOST_PROFILE) counts what a kernel issues per AIE2P slot
class, per marked loop, and the block streams live at once; int4awq.design.kernel_profile reads it.
"""

import ctypes
import os

import pytest

from int4awq.design.kernel_profile import (
    SLOTS,
    loop_hazards,
    profile_accumulate,
    read_profile,
)
from host_args import host_aie_api_library

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A kernel of known issue: per call, an entry-marked loop of 4 trips (two 512-bit loads, one add, one
# store and one element extracted to the scalar unit each), a per-iteration-marked loop (chess style) of 3 trips run twice, a 1024-bit load outside
# loops, and two input streams and one output stream alive together.
SOURCE = r"""
#include <aie_api/aie.hpp>
extern "C" void probe(const int32 *in, int32 *out, uint8_t *blocks) {
    AIE_HOST_LOOP_ENTRY
    for (int i = 0; i < 4; ++i) {
        auto a = aie::load_v<16>(in + 16 * i);
        auto b = aie::load_v<16>(in + 64 + 16 * i);
        aie::store_v(out + 16 * i, aie::add(a, b));
        out[64 + i] = a[i];  // one element moved to the scalar unit
    }
    for (int r = 0; r < 2; ++r) {
        auto x = aie::load_v<32>(in);  // outside any marked loop, 1024 bits: two loads
        for (int j = 0; j < 3; ++j) chess_prepare_for_pipelining {
            aie::store_v(out, x.extract<16>(0));
        }
    }
    aie::block_vector_input_buffer_stream<bfp16ebs8, 64> s0(reinterpret_cast<bfp16ebs8 *>(blocks));
    aie::block_vector_input_buffer_stream<bfp16ebs8, 64> s1(reinterpret_cast<bfp16ebs8 *>(blocks + 128));
    aie::block_vector_output_buffer_stream<bfp16ebs8, 64> o(reinterpret_cast<bfp16ebs8 *>(blocks + 256));
    const auto b0 = s0.pop(), b1 = s1.pop();
    for (int i = 0; i < 4; ++i)  // 8 pushes: whole 512-bit words (the host stops on a partial one)
        o << b0 << b1;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    d = tmp_path_factory.mktemp("profile")
    return ctypes.CDLL(
        host_aie_api_library(str(d), "probe", SOURCE, "-DAIE_HOST_PROFILE")
    )


def run_probe(lib):
    import numpy as np

    a = np.zeros(128 + 16, np.int32)
    out = np.zeros(64 + 16, np.int32)
    blocks = np.zeros(256 + 576 + 64, np.uint8)
    off = (-blocks.ctypes.data) % 64
    lib.aie_host_profile_reset()
    lib.probe(
        ctypes.c_void_p(a.ctypes.data + (-a.ctypes.data) % 64),
        ctypes.c_void_p(out.ctypes.data + (-out.ctypes.data) % 64),
        ctypes.c_void_p(blocks.ctypes.data + off),
    )
    return read_profile(lib)


def test_the_profile_counts_loops_slots_and_streams(probe):
    p = run_probe(probe)
    by_kind = sorted(p.loops, key=lambda lp: lp.line)
    entry, per_iteration = by_kind
    assert entry.entries == 1 and entry.ops == dict(zip(SLOTS, (0, 8, 4, 0, 0, 4, 4)))
    assert per_iteration.entries == 2  # two runs of three consecutive iterations
    assert (entry.iterations, per_iteration.iterations) == (0, 6)  # 0: not marked
    assert per_iteration.ops["STORE"] == 6
    # outside loops: the two 1024-bit loads (2 each), two pops (each stream's first pop refills its FIFO:
    # 2 each), eight pushes (push + flush)
    assert p.outside["LOAD"] == 4 + 4 and p.outside["STORE"] == 16
    assert (p.peak_in, p.peak_out) == (2, 1)
    assert p.cycles_lower_bound == 4 + 6 + 24  # loads in pairs; the rest one per cycle


def test_the_kernels_hot_loop_is_one_mmul_per_step_and_its_streams_are_counted():
    p = profile_accumulate(64, 64, 64, 128)
    # one 8x8x8 block matmul per step, plus the scale folds: per 8x8 block of C two 64-lane bf16 macs of 2
    # instructions each, plus column pair 0's conversion of every second A block by a multiply by one (2
    # instructions, 32 blocks); all of it inside marked loops
    assert sum(lp.ops["MAC"] for lp in p.loops) == 8 * 8 * 8 + 64 * 2 * 2 + 32 * 2
    assert p.outside["MAC"] == 0
    conv, hot = sorted(
        (lp for lp in p.loops if lp.ops["MAC"]), key=lambda lp: lp.ops["MAC"]
    )
    # per pair of 8-row blocks of A: the A conversion (one span), then the hot loop over 4 column pairs
    assert conv.entries == hot.entries == 64 // 16
    assert (conv.iterations, hot.iterations) == (4, 4 * 4)
    # per row pair: 8 A blocks multiplied by one (2 instructions each)
    assert conv.ops["MAC"] == 4 * 8 * 2
    # per row pair: 8 A blocks moved to an accumulator and converted (2 + 1), 8 multiplied by one and
    # converted (1): the second conversion of a pair is on the MAC slot
    assert conv.ops["CONVERT"] == 4 * (8 * 3 + 8 * 1)
    # per (row pair, column pair): 16 mmuls of 2 instructions, 4 folds of two macs of 2
    assert hot.ops["MAC"] == 16 * (8 * 2 * 2 + 4 * 2 * 2)
    # hot loop pops: 4 a step from two streams that each read 16 block vectors (18 words) per column
    # pair; then per 8x8 block of C a 2048-bit load of c and a 128-bit scale load (each fold loads its own
    # scales, so no fold holds two columns' worth: docs/kernel.md#register-pressure)
    assert hot.ops["LOAD"] == 16 * 2 * 18 + 64 * 4 + 16 * 4
    # the kernel keeps at most two input and one output block stream alive (the core's FIFOs)
    assert (p.peak_in, p.peak_out) == (2, 1)
    # per loop: the conversion writes the A line; the hot loop reads the A line and W
    assert (conv.peak_in, conv.peak_out) == (0, 1)
    assert (hot.peak_in, hot.peak_out) == (2, 0)
    # four mmul accumulators in the hot loop, and one more at a fold: the core's five
    assert (conv.acc_registers, hot.acc_registers) == (1, 5)


# Block-stream fills and accumulator registers, by hand: a stream opened outside a rolled (marked) loop
# fills its FIFO with every pop (aie_api cannot count the pops); one opened inside, popped in unrolled
# (unmarked) code, fills once per 512-bit word its pops enter. Six 2048-bit accumulators alive at once
# are one more than the core's five; an mmul's to_accum and a mac's result reuse a register.
REGISTERS_SOURCE = r"""
#include <aie_api/aie.hpp>
using BlockIn = aie::block_vector_input_buffer_stream<bfp16ebs8, 64>;
extern "C" void fills(uint8_t *blocks) {
    BlockIn s(reinterpret_cast<bfp16ebs8 *>(blocks));
    AIE_HOST_LOOP_ENTRY
    for (int i = 0; i < 8; ++i) (void)s.pop();
    AIE_HOST_LOOP_ENTRY
    for (int i = 0; i < 2; ++i) {
        BlockIn t(reinterpret_cast<bfp16ebs8 *>(blocks));
        for (int j = 0; j < 8; ++j) (void)t.pop();
    }
}
extern "C" void accumulators(float *c) {
    using MMUL = aie::mmul<8, 8, 8, bfp16ebs8, bfp16ebs8, accauto>;
    const aie::vector<bfloat16, 64> v = aie::broadcast<bfloat16, 64>(1.0f);
    AIE_HOST_LOOP_ENTRY
    for (int i = 0; i < 1; ++i) {
        MMUL m(aie::zeros<accfloat, 64>());
        aie::accum<accfloat, 64> a0(aie::load_v<64>(c)), a1(a0), a2(a0), a3(a0);
        a0 = aie::mac(a0, v, v);                       // in place: still 5 registers
        const aie::accum<accfloat, 64> g = m.to_accum(); // m's register: still 5
        aie::accum<accfloat, 64> a4(g);                // a sixth: 2048 bits spill
        aie::store_v(c, a4.to_vector<float>().extract<16>(0));
    }
}
"""


@pytest.fixture(scope="module")
def registers(tmp_path_factory):
    d = tmp_path_factory.mktemp("registers")
    return ctypes.CDLL(
        host_aie_api_library(str(d), "r", REGISTERS_SOURCE, "-DAIE_HOST_PROFILE")
    )


def _aligned(n, dtype):
    import numpy as np

    buf = np.zeros(n + 64, dtype)
    return buf, ctypes.c_void_p(buf.ctypes.data + (-buf.ctypes.data) % 64)


def test_fills_are_static_only_where_the_pops_can_be_counted(registers):
    _keep, blocks = _aligned(1024, "uint8")
    registers.aie_host_profile_reset()
    registers.fills(blocks)
    rolled, per_span = sorted(read_profile(registers).loops, key=lambda lp: lp.line)
    # 8 pops, each with its fill: 16 loads, 8 dynamic fills
    assert (rolled.ops["LOAD"], rolled.fills_static, rolled.fills_dynamic) == (16, 0, 8)
    # twice 8 pops of 72 bytes from an aligned start: 9 words, one fill, each time
    assert (per_span.ops["LOAD"], per_span.fills_static, per_span.fills_dynamic) == (
        18,
        2,
        0,
    )


def test_live_accumulators_count_registers_not_views(registers):
    _keep, c = _aligned(64, "float32")
    registers.aie_host_profile_reset()
    registers.accumulators(c)
    p = read_profile(registers)
    (loop,) = p.loops
    assert loop.peak_acc_bits == 6 * 2048 and loop.acc_registers == 6
    assert loop.acc_spill_bits == 2048 and p.acc_spill_bits_total == 2048


@pytest.mark.parametrize(
    "tile, fills",
    [
        # spans of 8 K blocks, unrolled: per row pair, each of the 4 column pairs pops 16 A and 16 W
        # blocks (18 words each: 2 fills each): 4 row pairs x 4 pairs x 4
        ((64, 64, 64, 128), (64, 0)),
        # GS 256 > 16 K blocks per span: the rolled K loop pops with a fill each (32 steps x 4 pops)
        ((16, 16, 256, 256), (0, 128)),
    ],
    ids=["unrolled-span", "rolled-span"],
)
def test_our_kernel_fills_statically_where_its_spans_unroll(tile, fills):
    p = profile_accumulate(*tile)
    assert p.fills == fills
    assert p.acc_registers <= 5 and p.acc_spill_bits_total == 0


# What keeps the pipeliners off a loop, read from the source (kernel_profile.loop_hazards).
HAZARD_SOURCE = """void outlined(int *p) {
  p[0] = 1;
}
inline int inlined(int x) { return x; }
void entry(int *p, int n) {
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (int i = 0; i < n; ++i) {
    p[i % 9] = inlined(i); // a remainder
  }
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (int i = 0; i < n; ++i) {
    outlined(p + i);
  }
  AIE_LOOP_MIN_ITERATION_COUNT(1)
  for (int i = 0; i < n; ++i) {
    p[i] = inlined(i) * 2; // % and outlined( in a comment only
  }
}
"""


@pytest.mark.parametrize(
    "line, hazards",
    [(6, ["a remainder (%)"]), (10, ["a call of outlined"]), (14, [])],
    ids=["remainder", "out-of-line-call", "clean"],
)
def test_loop_hazards_reads_remainders_and_calls_in_a_marked_loop(line, hazards):
    assert loop_hazards(HAZARD_SOURCE, line) == hazards


def test_no_marked_loop_of_our_kernel_has_a_remainder_or_a_call():
    from int4awq.design.kernel_profile import KERNEL_FILES, SITE_BASE, site_hazards

    sites = []
    for base, name in enumerate(KERNEL_FILES):
        src = open(os.path.join(REPO, "kernels", name)).read()
        sites += [
            base * SITE_BASE + i
            for i, line in enumerate(src.splitlines(), 1)
            if line.strip().startswith("AIE_LOOP_MIN_ITERATION_COUNT(")
        ]
    assert len(sites) >= 10 and {s // SITE_BASE for s in sites} == {0, 1, 2}
    assert {s: site_hazards(s) for s in sites} == {s: [] for s in sites}
