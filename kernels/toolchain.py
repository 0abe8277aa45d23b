# SPDX-License-Identifier: MIT
"""The Peano build's checks, for kernels/Makefile (docs/kernel.md#the-toolchain):

    python3 kernels/toolchain.py version --minimum V --pin V -- "<clang++ --version output>"
    python3 kernels/toolchain.py size --limit BYTES --object F -- "<llvm-size output>"
    python3 kernels/toolchain.py registers FILE...

version: an llvm-aie build older than the minimum is refused (exit 2); one other than the pin is warned about
(stderr, exit 0); one whose build cannot be read from the version text is warned about too. size: an object
whose code (the .text sections in llvm-size -A) exceeds the core's program memory is refused (exit 2).
registers: every `for` loop of the files must state, in the comment lines (or loop macros) just above it,
what it keeps live as `// live: N vec, M acc` (N 512-bit vector registers, M 2048-bit accumulators, counted
from the source: docs/kernel.md#register-pressure); a loop without it, or past AIE2P's 12 / 5, is refused
(exit 2). No compiler needed: it reads the source.
"""

from __future__ import annotations

import argparse
import re
import sys

# llvm-aie nightlies are versioned <llvm major.minor.patch>.<YYYYMMDDNN>[+<commit>]
# (e.g. 21.0.0.2026080301+c9c5ecb7, as llvm-aie #1262 quotes them).
BUILD = re.compile(r"\b(\d+)\.(\d+)\.(\d+)\.(\d{10})(?:\+([0-9a-f]+))?")


def build_of(text: str) -> tuple | None:
    """(major, minor, patch, stamp) of the first llvm-aie build number in `text`, or None."""
    m = BUILD.search(text)
    return None if m is None else tuple(int(g) for g in m.groups()[:4])


def check_version(text: str, minimum: str, pin: str) -> tuple[int, str]:
    """(exit code, message): 2 below the minimum, 0 otherwise (with a warning off the pin)."""
    have, low, want = build_of(text), build_of(minimum), build_of(pin)
    if have is None:
        first = text.strip().splitlines()[0] if text.strip() else "(nothing)"
        return 0, (
            f"warning: cannot read the llvm-aie build from `clang++ --version` ({first}); the kernel is "
            f"written against {pin} and needs at least {minimum} (docs/kernel.md#the-toolchain)"
        )
    version = ".".join(str(x) for x in have)
    if have < low:
        return 2, (
            f"kernels/Makefile: Peano (llvm-aie) {version} is older than {minimum}, the first build with "
            f"the fixes the kernel relies on (llvm-aie #995, fixed by #1184); install {pin} "
            "(docs/kernel.md#the-toolchain)"
        )
    if have != want:
        return 0, (
            f"warning: Peano (llvm-aie) {version} is not {pin}, the build the kernel is written against; a "
            "newer nightly has miscompiled a hardware-tested kernel before (llvm-aie #1262): check the "
            "results (docs/kernel.md#the-toolchain)"
        )
    return 0, ""


def text_bytes(size_output: str) -> int:
    """The bytes of the `.text` sections in llvm-size's section listing (`-A`, sysv format): what program
    memory holds. Berkeley's "text" column also counts `.rodata`, which mlir-aie's core linker script puts
    in data memory, so it is not used."""
    lines = [ln.split() for ln in size_output.strip().splitlines() if ln.strip()]
    header = next(
        (i for i, row in enumerate(lines) if row[:2] == ["section", "size"]), None
    )
    if header is None:
        raise ValueError(f"not llvm-size -A output: {size_output.strip()[:80]!r}")
    return sum(
        int(row[1])
        for row in lines[header + 1 :]
        if len(row) >= 2 and (row[0] == ".text" or row[0].startswith(".text."))
    )


def check_size(size_output: str, limit: int, obj: str) -> tuple[int, str]:
    code = text_bytes(size_output)
    if code > limit:
        return 2, (
            f"kernels/Makefile: {obj} holds {code} bytes of code, more than the {limit} bytes of a core's "
            "program memory: build fewer entries into it or smaller tiles (docs/kernel.md#the-toolchain)"
        )
    return 0, (
        f"{obj}: {code} of {limit} bytes of program memory in its .text (the linked core adds crt0, the "
        "core's main and library routines: the core ELF's .text is the full figure)"
    )


# AIE2P's register file (llvm-aie AIE2PRegisterInfo.td): 12 x 512-bit vector registers, 5 x 2048-bit
# accumulators.
VEC_REGISTERS, ACC_REGISTERS = 12, 5
LIVE = re.compile(r"//\s*live:\s*(\d+)\s*vec,\s*(\d+)\s*acc\b")
# Lines that may stand between a loop's annotation and its `for`: comments, loop macros.
LOOP_MACRO = re.compile(r"(AIE_\w+|KERNEL_\w+)(\(.*\))?$")


def without_comments(source: str) -> str:
    """C++ source with its comments blanked (line breaks kept, so line numbers hold)."""
    return re.sub(
        r"//[^\n]*|/\*.*?\*/",
        lambda m: re.sub(r"[^\n]", " ", m.group()),
        source,
        flags=re.S,
    )


def loop_registers(source: str) -> list[tuple[int, int | None, int | None]]:
    """(line, vec, acc) of every `for` loop in the source: the counts its `// live:` annotation states,
    None where it has none."""
    lines = source.splitlines()
    loops = []
    for i, code in enumerate(without_comments(source).splitlines()):
        if not re.search(r"\bfor\s*\(", code):
            continue
        vec = acc = None
        for above in reversed(lines[:i]):
            text = above.strip()
            if text.startswith("//"):
                m = LIVE.search(text)
                if m and vec is None:
                    vec, acc = int(m.group(1)), int(m.group(2))
            elif not LOOP_MACRO.match(text):
                break
        loops.append((i + 1, vec, acc))
    return loops


def check_registers(sources: dict[str, str]) -> tuple[int, str]:
    """(exit code, message) for the files' loops (name -> text): 2 if one lacks its annotation or states
    more than the registers."""
    bad, n = [], 0
    for name, text in sources.items():
        for line, vec, acc in loop_registers(text):
            n += 1
            if vec is None:
                bad.append(
                    f"{name}:{line}: loop without a `// live: N vec, M acc` annotation"
                )
            elif vec > VEC_REGISTERS or acc > ACC_REGISTERS:
                bad.append(
                    f"{name}:{line}: {vec} vector values and {acc} accumulators live, past AIE2P's "
                    f"{VEC_REGISTERS} / {ACC_REGISTERS}: restructure the loop"
                )
    if bad:
        return 2, "\n".join(
            ["kernels/toolchain.py registers (docs/kernel.md#register-pressure):"] + bad
        )
    return 0, (
        f"{n} loops, each within {VEC_REGISTERS} vector registers and {ACC_REGISTERS} accumulators as "
        "stated"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    v = sub.add_parser("version")
    v.add_argument("--minimum", required=True)
    v.add_argument("--pin", required=True)
    v.add_argument("text")
    s = sub.add_parser("size")
    s.add_argument("--limit", type=int, required=True)
    s.add_argument("--object", required=True)
    s.add_argument("text")
    r = sub.add_parser("registers")
    r.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.what == "version":
            code, msg = check_version(args.text, args.minimum, args.pin)
        elif args.what == "size":
            code, msg = check_size(args.text, args.limit, args.object)
        else:
            texts = {}
            for path in args.files:
                with open(path, encoding="utf-8") as f:
                    texts[path] = f.read()
            code, msg = check_registers(texts)
    except ValueError as e:
        code, msg = 2, f"kernels/toolchain.py: {e}"
    if msg:
        print(msg, file=sys.stderr if code or msg.startswith("warning") else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
