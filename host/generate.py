#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Generate text with a Llama checkpoint on the NPU path's arithmetic (int4awq/run/generate.py).

    host/generate.py --model Llama-3.2-1B-Instruct-Q4_K_M.gguf --prompt "The capital of France is" --tokens 16
    host/generate.py --model awq_dir --prompt "Hello" --chat --check

The prompt is tokenized by the file's own tokenizer (a GGUF header's, or the directory's tokenizer.json),
prefilled through the GEMM, then each token made by the decode path and printed as it comes; greedy unless
--temperature is given. --check compares every step with a float64 reference of the same weights.

Exit codes: 0 done (PASS! last with --check), 1 a --check step failed (its figures printed) or a run
failed, 2 bad input (one line), 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from int4awq.errors import (  # noqa: E402  (standard library only)
    ConfigError,
    command_exit,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ConfigError(f"{message} (see --help)")


def parse(argv):
    p = _Parser(
        description=__doc__.splitlines()[0],
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model",
        required=True,
        help="a GGUF file or a Hugging Face (AutoAWQ, GPTQ, compressed-tensors) checkpoint directory",
    )
    p.add_argument("--prompt", required=True)
    p.add_argument(
        "--tokens", type=int, default=32, help="tokens to generate at most (32)"
    )
    p.add_argument(
        "--backend",
        default="auto",
        help="model: the kernels' numpy models, bit for bit the emulator's launches; emu: each dispatch of a "
        "token on the emulator; sim: on the simulator of the compiled design (slow: for a few tokens); npu: "
        "on NPU2 (mlir-air's XRTBackend, Peano); each prefills through the GEMM design on it; auto "
        "(default): npu where an NPU2 and pyxrt are present, else model",
    )
    p.add_argument(
        "--chat",
        action="store_true",
        help="wrap the prompt in the file's chat template",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default)")
    p.add_argument(
        "--top-k", type=int, default=0, help="sample among the k likeliest (0: all)"
    )
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed")
    p.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="the KV cache's positions (default: the most the attention launch holds, at most the model's)",
    )
    p.add_argument(
        "--head-format",
        choices=["awq"],
        default=None,
        help="a float LM head quantised at load to AWQ int4 g128 (needed where the head is a float tensor)",
    )
    p.add_argument(
        "--no-compile",
        action="store_true",
        help="with --backend emu: run the modules without compiling them with aircc + aiecc first",
    )
    p.add_argument(
        "--layers-per-dispatch",
        type=int,
        default=None,
        help="with --backend emu, sim or npu: the layers each dispatch runs, the first module with the "
        "first ones (default 4: one module of their launches each); 0: one dispatch a module (the first "
        "module, then one a layer)",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="compare every step with a float64 reference of the same weights",
    )
    a = p.parse_args(argv)
    from int4awq.run.generate import LAYERS_PER_DISPATCH

    if a.layers_per_dispatch is None:
        a.layers_per_dispatch = LAYERS_PER_DISPATCH
    if a.layers_per_dispatch < 0:
        raise ConfigError(
            f"--layers-per-dispatch {a.layers_per_dispatch}: at least 1, or 0 for one a module"
        )
    if a.tokens < 1:
        raise ConfigError(f"--tokens {a.tokens}: at least 1")
    if a.temperature < 0 or a.top_k < 0 or a.seed < 0:
        raise ConfigError(
            "--temperature, --top-k and --seed: non-negative (temperature 0 is greedy)"
        )
    from int4awq.run.generate import BACKENDS

    if a.backend not in BACKENDS:
        raise ConfigError(
            f"--backend {a.backend}: generate runs on {', '.join(BACKENDS)} so far (the NPU runs a layer's "
            "module: host/run.py --decoder-layer)"
        )
    return a


def _pyxrt() -> bool:
    try:
        import pyxrt  # noqa: F401
    except ImportError:
        return False
    return True


def _main(argv) -> int:
    a = parse(argv)
    from int4awq.formats.tokenizer import load_tokenizer
    from int4awq.run.generate import Dispatches, Llama, Reference, Sampler, generate

    tok = load_tokenizer(a.model)
    prompt = tok.chat(a.prompt) if a.chat else tok.encode(a.prompt)
    if not prompt:
        raise ConfigError("--prompt: the prompt has no tokens")
    t0 = time.perf_counter()
    model = Llama(a.model, a.head_format, a.max_context)
    if len(prompt) + a.tokens > model.context:
        raise ConfigError(
            f"--prompt of {len(prompt)} tokens and --tokens {a.tokens}: past the context of {model.context} "
            "positions (--max-context)"
        )
    if tok.vocab_size > model.vocab or model.head.n < tok.vocab_size:
        raise ConfigError(
            f"{a.model}: the tokenizer has {tok.vocab_size} tokens, the embedding {model.vocab} and the LM "
            f"head {model.head.n}"
        )
    backend = a.backend
    if backend in ("auto", "npu"):
        from int4awq.run.npu import npu2_present

        found, why = npu2_present()
        if backend == "npu" and not (found and _pyxrt()):
            raise ConfigError(
                f"--backend npu: {why if not found else 'pyxrt is not importable (source XRT setup.sh)'}"
            )
        backend = "npu" if found and _pyxrt() else "model"
    runner = (
        None
        if backend == "model"
        else Dispatches(
            model,
            backend,
            compile_first=not a.no_compile,
            layers_per_dispatch=a.layers_per_dispatch,
        )
    )
    reference = Reference(model) if a.check else None
    print(tok.describe())
    print(
        f"model: {len(model.layers)} layer{'s' if len(model.layers) != 1 else ''}, hidden {model.hidden}, {model.heads} query / {model.kv_heads} "
        f"key-value heads of {model.d}, vocabulary {model.vocab}, context {model.context}; "
        f"{model.head_summary} (loaded in {time.perf_counter() - t0:.1f} s)"
    )
    stream = tok.stream()
    print(f"prompt: {len(prompt)} tokens", flush=True)
    shown = []

    def show(t: int) -> None:
        """The prompt's text before the first token, then each token's text as it comes."""
        if not shown:
            sys.stdout.write(tok.decode(prompt))
        shown.append(t)
        sys.stdout.write(stream.push(t))
        sys.stdout.flush()

    try:
        out, checks, prefill_s, decode_s = generate(
            model,
            prompt,
            a.tokens,
            Sampler(a.temperature, a.top_k, a.seed),
            set(tok.eos_ids),
            show,
            reference,
            lambda line: print(line, flush=True),
            tok.vocab_size,
            runner and runner.step,
            runner
            and functools.partial(
                runner.prefill, progress=lambda line: print(line, flush=True)
            ),
        )
    finally:
        if runner is not None:
            runner.close()
    sys.stdout.write(stream.finish() + "\n")
    token_s, dispatches = model.modelled_token_s(a.layers_per_dispatch)
    npu_prefill = model.modelled_prefill_s(len(prompt))
    decoded = max(len(out) - 1, 0)
    cpu = f"{decoded / decode_s:.2f} tok/s" if decoded and decode_s > 0 else "-"
    print(
        f"generated {len(out)} tokens; {backend} backend, wall time here: prefill {prefill_s:.2f} s, decode "
        f"{cpu}; MODELLED on NPU2: prefill {npu_prefill * 1e3:.2f} ms, decode {token_s * 1e3:.2f} ms a "
        f"token = {1 / token_s:.1f} tok/s in {dispatches} dispatch{'es' if dispatches > 1 else ''} "
        f"(context {model.context})"
    )
    if runner is not None and getattr(runner, "calls", None):
        print(
            f"host <-> NPU the last token: {sum(c.written for c in runner.calls) / 1e3:.0f} KB written, "
            f"{sum(c.read_back for c in runner.calls) / 1e3:.0f} KB read (the buffers kept on the device)"
        )
    if runner is not None and runner.timed:
        print(
            f"as compiled (the simulator's timed mode, MODELLED): the last token's {len(runner.timed)} "
            f"modules, attention included, {sum(runner.timed) * 1e3:.3f} ms with their dispatches' "
            "fixed cost"
        )
    if reference is None:
        return 0
    for c in checks:
        print(c.line())
    ok = all(c.passed for c in checks)
    print("PASS!" if ok else "FAIL!")
    return 0 if ok else 1


def main(argv=None) -> int:
    return command_exit(_main, argv)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
