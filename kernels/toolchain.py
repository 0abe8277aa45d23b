# SPDX-License-Identifier: MIT
"""The Peano build's checks, for kernels/Makefile (docs/kernel.md#the-toolchain):

    python3 kernels/toolchain.py version --minimum V --pin V -- "<clang++ --version output>"
    python3 kernels/toolchain.py size --limit BYTES --object F -- "<llvm-size output>"

version: an llvm-aie build older than the minimum is refused (exit 2); one other than the pin is warned about
(stderr, exit 0); one whose build cannot be read from the version text is warned about too. size: an object
whose code (the .text sections in llvm-size -A) exceeds the core's program memory is refused (exit 2).
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
    args = ap.parse_args(argv)
    try:
        code, msg = (
            check_version(args.text, args.minimum, args.pin)
            if args.what == "version"
            else check_size(args.text, args.limit, args.object)
        )
    except ValueError as e:
        code, msg = 2, f"kernels/toolchain.py: {e}"
    if msg:
        print(msg, file=sys.stderr if code or msg.startswith("warning") else sys.stdout)
    return code


if __name__ == "__main__":
    sys.exit(main())
