# SPDX-License-Identifier: MIT
"""`make sim-all`: every default design run twice, by the emulator (the builder's AIR, interpreted) and by
the simulator of the design aircc + aiecc compile (emulator/aiesim: the placed buffers, locks, BD chains,
routes and the runtime sequence, with the same host-built kernel on the cores), on the same inputs. The
outputs must be equal bit for bit: the same kernel computes on the same bytes, so any difference is the
data movement or the synchronisation the compiler produced.

The designs: the GEMM at each make target and format, the decode GEMV in each format, and the bring-up
probes (host/aircc_check.py's list). `--only TEXT` runs those whose name holds TEXT; `--small` the ones
`make test` runs; `--dispatches N` (default 2) runs each instruction stream N times on the same array,
each dispatch's outputs compared with the emulator's. Exit status: 0 all equal, 1 a difference, a hang, a
race, words left in a stream or a BD half received at the end of any dispatch, or another failure; 2 no
compiler, or a bad --dispatches.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMULATOR_DIR = os.path.join(REPO, "emulator")
for _p in (REPO, EMULATOR_DIR):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import numpy as np  # noqa: E402
from ml_dtypes import bfloat16  # noqa: E402

from int4awq.design import compiler  # noqa: E402
from int4awq.design.design import DesignConfig  # noqa: E402

# A resident across 2 N blocks (n_per_segment, novel), at a small shape
RESIDENT_NAME = "n_per_segment 2, 128x512x256 (16x16x128 / 256, herd 8x4)"
RESIDENT = DesignConfig(
    m=128, k=512, n=256, gs=128, tile_m=16, tile_n=16, tile_k_l1=128, tile_k_l2=256,
    herd_m=8, herd_n=4, n_per_segment=2,
)  # fmt: skip
# The designs `make test` simulates (seconds each); sim-all runs every one.
SMALL = ("make run1x1", "make run2x4", "bring-up probe", "two decode GEMVs chained")


@dataclasses.dataclass
class Case:
    name: str
    build: object  # () -> the AIR module
    options: dict  # XRTBackend keyword arguments
    inputs: object  # () -> the host arrays, inputs and outputs
    outputs: tuple[int, ...]  # which of them the design writes
    library_dir: object  # () -> the folder of the host kernel library


def cases() -> list[Case]:
    from host import aircc_check
    from host import kernel_probe as kp
    from int4awq.design import gemv
    from int4awq.formats.quant import random_activations
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.kernel import record
    from int4awq.kernel.kernel_model import build_host_kernel
    from host.run import build_host_kernel as build_config_kernel

    out = []

    def config_case(name, cfg):
        import matmul_int4_packed
        import matvec_int4_packed

        builder = (
            matvec_int4_packed
            if type(cfg).__name__ == "GemvConfig"
            else matmul_int4_packed
        )

        def inputs():
            w = random_format_weights(cfg.format, cfg.k, cfg.n, cfg.gs, seed=1)
            a = random_activations(cfg.m, cfg.k, 2)
            return cfg.call_buffers(*record.padded_operands(cfg, a, w))

        return Case(
            name,
            lambda: builder.build_module(**cfg.builder_args()),
            builder.backend_options(cfg),
            inputs,
            (2,),
            lambda: build_config_kernel(cfg),
        )

    for target, variables in [(t, ()) for t in aircc_check.MAKE_TARGETS] + [
        ("run8x4", (f"FORMAT={fmt}",)) for fmt in record.FORMATS if fmt != "awq"
    ]:
        name = " ".join(["make", target, *variables])
        out.append(
            config_case(name, aircc_check.make_target_config(target, *variables))
        )
    for fmt, gs in record.FORMAT_GS.items():
        cfg = gemv.default_config(1, 2048, 2048, gs, fmt)
        out.append(config_case(f"make run_llama_decode FORMAT={fmt}", cfg))
    # A resident across 2 N blocks, re-sent by the refeed primitive (novel: docs/design.md#a-resident-
    # across-n-blocks-n_per_segment), at a small shape: the emulator sends the re-sent slices in aircc's
    # BD ring order, and the compiled design must agree under every schedule
    out.append(config_case(RESIDENT_NAME, RESIDENT))
    out.append(chained_case())
    # a decoder layer's o_proj + FFN as one module of seven launches (o_gemv_ffn_int4.py), at the smallest
    # sizes whose GEMVs fill 32 PEs; gate_up's tile makes it a second kernel object
    import o_gemv_ffn_int4
    from int4awq.design import layer as layer_model
    from int4awq.formats import rope

    layer = small_layer()

    def module_inputs(cfg, rows):
        """A module's buffers: seeded weights in each GEMV's format, seeded rows by name, and the RoPE row
        of position 77."""
        names = [name for name, _ in cfg.buffers()]
        weights = {
            name: random_format_weights(
                g.format, g.k, g.n, g.gs, seed=names.index(name)
            )
            for name, g in cfg.buffers()
            if not isinstance(g, (int, tuple))
        }
        given = {
            name: random_activations(1, cfg.hidden, names.index(name)) for name in rows
        }
        given["rope_table"] = rope.table(rope.base_frequencies(500000.0, 64), 77)
        if cfg.context:  # 77 cache rows before the token, the rows from it on NaN
            d, heads, kv = cfg.rope
            rng = np.random.default_rng(77)
            k, v = (
                rng.standard_normal((cfg.context, kv * d)).astype(bfloat16)
                for _ in "kv"
            )
            k[77:] = v[77:] = np.nan
            zeros = np.zeros(heads * d)
            given["kv_cache"] = o_gemv_ffn_int4.attention_cache(k, v)
            given["q_attn"] = o_gemv_ffn_int4.attention_q(
                zeros, zeros[: kv * d], zeros[: kv * d], 77, kv
            )
        return layer_model.module_buffers(cfg, weights, given)

    out.append(
        Case(
            "decoder layer o_proj + FFN module (o_gemv_ffn_int4.py), hidden 512, ending with the next "
            "layer's q, k, v and their RoPE",
            lambda: o_gemv_ffn_int4.build_module(layer),
            o_gemv_ffn_int4.backend_options(layer),
            lambda: module_inputs(layer, ("attn", "x", "ffn_norm", "next_norm")),
            tuple(range(layer.index("proj"), len(layer.buffers()))),
            lambda: layer_model.host_libraries(layer),
        )
    )
    token_first = small_qkv()
    out.append(
        Case(
            "the token's first module (o_gemv_ffn_int4.build_qkv_module), hidden 512: its norm, q and k "
            "(AWQ), v (int8_triple) and their RoPE",
            lambda: o_gemv_ffn_int4.build_qkv_module(token_first),
            o_gemv_ffn_int4.backend_options(token_first),
            lambda: module_inputs(token_first, ("x", "attn_norm")),
            tuple(range(token_first.index("normed"), len(token_first.buffers()))),
            lambda: layer_model.host_libraries(token_first),
        )
    )
    # both ending with the next layer's attention launch over a cache of 128 positions (generate's
    # dispatches)
    for cfg, rows, written_from, what in (
        (
            small_layer(128),
            ("attn", "x", "ffn_norm", "next_norm"),
            "proj",
            "decoder layer o_proj + FFN module (o_gemv_ffn_int4.py), hidden 512, ending with the next "
            "layer's q, k, v, RoPE and attention over 128 positions (77 cached)",
        ),
        (
            small_qkv(128),
            ("x", "attn_norm"),
            "normed",
            "the token's first module (o_gemv_ffn_int4.build_qkv_module), hidden 512, ending with the "
            "attention over 128 positions (77 cached)",
        ),
    ):
        out.append(
            Case(
                what,
                lambda c=cfg: (
                    o_gemv_ffn_int4.build_module(c)
                    if hasattr(c, "next_qkv")
                    else o_gemv_ffn_int4.build_qkv_module(c)
                ),
                o_gemv_ffn_int4.backend_options(cfg),
                lambda c=cfg, r=rows: module_inputs(c, r),
                tuple(range(cfg.index(written_from), len(cfg.buffers()))),
                lambda c=cfg: layer_model.host_libraries(c),
            )
        )
    out.append(attention_case())
    out.append(token_case(module_inputs))
    for obj, rows in (
        (kp.PROBE_GEMM, kp.PROBE_GEMM.tile_m),
        (kp.PROBE_GEMV, kp.GEMV_PROBE_ROWS),
    ):
        for stage in kp.STAGES:
            probe = kp.Probe(obj, rows, stage)

            def inputs(p=probe):
                rng = np.random.default_rng(3)
                arrays = []
                for name, shape, dtype in p.args()[: p.n_inputs]:
                    if np.dtype(dtype) == np.uint8:
                        arrays.append(rng.integers(0, 256, shape, dtype=np.uint8))
                    else:
                        arrays.append(rng.standard_normal(shape).astype(dtype))
                return p.buffers(arrays)

            out.append(
                Case(
                    f"bring-up probe {probe.name}",
                    lambda p=probe: kp.build_module(p),
                    kp.backend_options(probe),
                    inputs,
                    tuple(range(probe.n_inputs, len(probe.args()))),
                    lambda p=probe: str(build_host_kernel(p.obj).parent),
                )
            )
    return out


def chained_case() -> Case:
    """Two decode GEMVs chained in one module of two launches (a device each, aircc_check's design)."""
    import matvec_int4_packed
    from host import aircc_check
    from host.run import build_host_kernel as build_config_kernel
    from int4awq.formats.quant import random_activations
    from int4awq.formats.weights_file import random_format_weights
    from int4awq.kernel import record

    first, second = aircc_check.chained_configs()

    def chained_inputs():
        tn, tk = first.tile_n, first.tile_k_l1
        w1, w2 = (
            random_format_weights("awq", c.k, c.n, c.gs, seed=i)
            for i, c in ((1, first), (2, second))
        )
        return [
            random_activations(first.m, first.k, 2),
            record.pack_weights(w1, tn, tk, dense=first.kernel.dense),
            np.zeros((first.m, first.n), bfloat16),
            record.pack_weights(w2, tn, tk, dense=second.kernel.dense),
            np.zeros((second.m, second.n), bfloat16),
        ]

    return Case(
        aircc_check.CHAINED_NAME,
        lambda: matvec_int4_packed.build_chained_module(**aircc_check.CHAINED),
        matvec_int4_packed.backend_options(first),
        chained_inputs,
        (2, 4),
        lambda: build_config_kernel(first),
    )


def attention_case() -> Case:
    """Decode attention (o_gemv_ffn_int4.build_attention_module) at 8 query heads over 2 key/value heads
    of 64 and a cache of 128 positions, 77 of them valid (the rows past them NaN: neither used nor
    needed), the token's own key and value in the q buffer: each PE's two DMAs, 8 steps of chunks, the
    softmax between."""
    import o_gemv_ffn_int4
    from int4awq.kernel.kernel_model import build_eltwise_kernel

    heads, kv, d, context, n = 8, 2, 64, 128, 77

    def inputs():
        rng = np.random.default_rng(7)
        q, k, v = (
            rng.standard_normal(size).astype(bfloat16)
            for size in (heads * d, kv * d, kv * d)
        )
        cached_k, cached_v = (
            rng.standard_normal((context, kv * d)).astype(bfloat16) for _ in "kv"
        )
        cached_k[n:] = cached_v[n:] = np.nan
        return [
            o_gemv_ffn_int4.attention_q(q, k, v, n, kv),
            o_gemv_ffn_int4.attention_cache(cached_k, cached_v),
            np.zeros((1, heads * d), bfloat16),
        ]

    return Case(
        f"decode attention, {heads} / {kv} heads of {d}, context {context} ({n} valid)",
        lambda: o_gemv_ffn_int4.build_attention_module(heads, kv, d, context),
        o_gemv_ffn_int4.attention_backend_options(),
        inputs,
        (2,),
        lambda: str(build_eltwise_kernel().parent),
    )


def token_case(module_inputs) -> Case:
    """The whole token as one module (o_gemv_ffn_int4.build_token_module) at hidden 512: the first module,
    a layer ending with the next layer's q, k, v, RoPE and attention, a last layer ending with the LM head;
    each module's inputs module_inputs' (distinct seeds a module), placed in the token's buffers.
    """
    import o_gemv_ffn_int4
    from int4awq.design import layer as layer_model

    token = small_token()

    def inputs():
        empty = [{} for _ in token.modules]
        out = layer_model.token_buffers(token, empty, empty)
        for j, m in enumerate(token.modules):
            given = [n for n, _ in m.buffers() if n.endswith("norm")] + ["x"] * (j == 0)
            mine = module_inputs(m, given)
            for (name, kind), value in zip(m.buffers(), mine):
                host = name in (*given, "rope_table", "kv_cache", "q_attn")
                if host or not isinstance(kind, (int, tuple)):
                    layer_model.put(token, out, j, name, value)
        return out

    return Case(
        "the whole token as one module (o_gemv_ffn_int4.build_token_module), hidden 512: the first module, "
        "a layer ending with the next layer's q, k, v, RoPE and attention over 128 positions (77 cached), "
        "the last ending with the LM head",
        lambda: o_gemv_ffn_int4.build_token_module(token),
        o_gemv_ffn_int4.backend_options(token),
        inputs,
        tuple(range(token.index("hidden"), len(token.buffers()))),
        lambda: layer_model.host_libraries(token),
    )


def small_token():
    """A token module at hidden 512 (8 query and 4 key/value heads of 64, a cache of 128): the first
    module's q, k, v GEMV (N 1024, small_layer's next one), small_layer(128), and a last layer whose module
    ends with an LM head of N 1024."""
    from int4_packed_record import GemvConfig, LayerConfig, QkvConfig, TokenConfig

    def gemv(k, n, tn=16):
        return GemvConfig(m=1, k=k, n=n, gs=128, tile_n=tn, tile_k_l1=128)

    first = QkvConfig((gemv(512, 1024, 32),), (64, 8, 4), 128)
    last = LayerConfig.named(
        gemv(512, 512), gemv(512, 2048, 32), gemv(1024, 512), head=gemv(512, 1024, 32)
    )
    return TokenConfig.named(first, (small_layer(128), last))


def small_layer(context: int = 0):
    """The layer module at hidden 512, intermediate 1024, ending with a q, k, v GEMV over N 1024 and the
    RoPE of its q and k (8 query and 4 key/value heads of 64): o_proj and down on one object, gate_up's and
    the q, k, v GEMV's tile_n 32 a second (its entries prefixed); context > 0: then the attention launch.
    """
    from int4_packed_record import GemvConfig
    from int4_packed_record import LayerConfig

    def gemv(k, n, tn=16):
        return GemvConfig(m=1, k=k, n=n, gs=128, tile_n=tn, tile_k_l1=128)

    return LayerConfig.named(
        gemv(512, 512),
        gemv(512, 2048, 32),
        gemv(1024, 512),
        (gemv(512, 1024, 32),),
        (64, 8, 4),
        context=context,
    )


def small_qkv(context: int = 0):
    """The token's first module at hidden 512 with 8 query and 8 key/value heads of 64: q and k as one AWQ
    GEMV (N 1024), v a second of another format and object (int8_triple, N 512), their entries prefixed;
    context > 0: then the attention launch.
    """
    from int4_packed_record import GemvConfig, QkvConfig

    return QkvConfig.named(
        (
            GemvConfig(m=1, k=512, n=1024, gs=128, tile_n=32, tile_k_l1=128),
            GemvConfig(
                m=1, k=512, n=512, gs=16, tile_n=16, tile_k_l1=128, format="int8_triple"
            ),
        ),
        (64, 8, 8),
        context,
    )


@dataclasses.dataclass
class Result:
    name: str
    equal: bool | None = None
    detail: str = ""
    emulated_s: float = 0.0
    simulated_s: float = 0.0
    modelled_us: float = 0.0
    # latent races the lock-ownership rule met (aiesim.hazards), under any schedule: reported, not failed
    hazards: tuple = ()


# the seeded schedules each design is simulated under (issue 51: at least 3), each compared with the
# emulator bit for bit
SEEDS = (0, 1, 2)
# the dispatches of the instruction stream each schedule runs on one array (issue 51), each dispatch's
# outputs compared with the emulator's
DISPATCHES = 2


def check(
    case: Case, dialect: bool = False, seeds=SEEDS, dispatches: int = DISPATCHES
) -> Result:
    """One design through the emulator and the simulator of its compiled form: its runtime sequence run
    from the instruction stream aiecc wrote (dialect=True: from the dialect-level ops, the cross-check),
    under each seeded schedule of `seeds`, `dispatches` times on the same array (aiesim.simulate), each
    dispatch's outputs compared with the emulator's.
    """
    import aiesim
    from air.backend.xrt import XRTBackend

    res = Result(case.name)
    os.environ["AIR_EMU_LIB_PATH"] = case.library_dir()
    module = case.build()
    _, outdir = compiler.compile_first(
        case.name, str(module), case.options, os.path.join(REPO, "build", "aircc-runs")
    )
    bufs = case.inputs()
    t0 = time.perf_counter()
    emulated = XRTBackend(**case.options).compile_and_load(module)(
        *[b.copy() for b in bufs]
    )
    res.emulated_s = time.perf_counter() - t0
    text = compiler.generic_form(os.path.join(outdir, "input_physical.mlir"))
    diffs, hazards = [], []
    for seed in seeds:
        where = f"seed {seed}: " if len(seeds) > 1 else ""
        t0 = time.perf_counter()
        try:
            _, sim = aiesim.simulate(
                text,
                [b.copy() for b in bufs],
                insts=outdir,
                dialect=dialect,
                seed=seed,
                dispatches=dispatches,
            )
        except aiesim.Hang as h:
            res.equal = False
            res.detail = f"{where}hangs:\n    " + "\n    ".join(h.report)
            return res
        except aiesim.SimError as e:  # a race among them
            res.equal, res.detail = False, f"{where}the simulator stops: {e}"
            return res
        res.simulated_s += time.perf_counter() - t0
        for k, simulated in enumerate(sim.dispatch_outputs, 1):
            at = where + (f"dispatch {k}: " if dispatches > 1 else "")
            for i in case.outputs:
                e = np.asarray(emulated[i]).view(np.uint8).reshape(-1)
                s = np.asarray(simulated[i]).view(np.uint8).reshape(-1)
                if not np.array_equal(e, s):
                    bad = np.flatnonzero(e != s)
                    diffs.append(
                        f"{at}output {i}: {bad.size} of {e.size} bytes differ, the first at byte "
                        f"{bad[0]}"
                    )
        # words in a stream or a BD half received when the sequence ends would meet the next dispatch
        diffs += [f"{where}left behind: {x}" for x in aiesim.leftovers(sim)]
        hazards += [h for h in aiesim.hazards(sim) if h not in hazards]
    res.equal = not diffs
    res.detail = "; ".join(diffs) or (
        "bit for bit"
        + (f" under seeds {', '.join(map(str, seeds))}" if seeds else "")
        + (f", on each of {dispatches} dispatches" if dispatches > 1 else "")
    )
    res.hazards = tuple(hazards)
    if res.hazards:
        res.detail += "; HAZARD (a latent race, not a failure here): " + "; ".join(
            res.hazards
        )
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="only the designs whose name holds this")
    ap.add_argument(
        "--small", action="store_true", help="only the designs make test runs"
    )
    ap.add_argument(
        "--dialect",
        action="store_true",
        help="run the runtime sequences at the dialect level (the cross-check), not their instruction streams",
    )
    ap.add_argument(
        "--dispatches",
        type=int,
        default=DISPATCHES,
        metavar="N",
        help=f"run each instruction stream N times on the same array, each dispatch checked (default "
        f"{DISPATCHES})",
    )
    args = ap.parse_args(argv)
    if args.dispatches < 1:
        print(
            f"sim-all: --dispatches {args.dispatches}: a number of dispatches (>= 1)",
            file=sys.stderr,
        )
        return 2
    missing = compiler.tools_missing()
    if missing:
        print(
            f"sim-all: the simulator runs what aircc + aiecc compile: {missing}",
            file=sys.stderr,
        )
        return 2
    todo = [
        c
        for c in cases()
        if (not args.only or args.only in c.name)
        and (not args.small or c.name.startswith(SMALL))
    ]
    failed = 0
    for i, c in enumerate(todo, 1):
        r = check(c, args.dialect, dispatches=args.dispatches)
        failed += not r.equal
        print(
            f"[{i}/{len(todo)}] {'ok  ' if r.equal else 'FAIL'} {c.name}: {r.detail} "
            f"(emulated {r.emulated_s:.1f} s, simulated {r.simulated_s:.1f} s)",
            flush=True,
        )
    print(f"{len(todo) - failed} equal, {failed} not")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
