# SPDX-License-Identifier: MIT
"""A reader of MLIR's generic op form (`aie-opt --mlir-print-op-generic`), the one grammar every op prints
in:

    %r = "dialect.op"(%a, %b)[^bb1, ^bb2] <{properties}> ({ regions }) {attributes} : (types) -> types

into a tree of `Op`s (name, results, operands, successors, attributes, regions of blocks, result types).
Attribute values are kept as their text; `Op.attr` reads integers, symbols, strings and integer arrays
out of it. Location suffixes (`loc(...)`) and comments are dropped. Enough for the physical designs
aiecc writes (input_physical.mlir); it is not a general MLIR parser and says where it stops.
"""

from __future__ import annotations

import dataclasses
import re


class ParseError(Exception):
    """The text is not generic-form MLIR this reader understands: the message says where."""


@dataclasses.dataclass
class Block:
    label: str
    args: list[tuple[str, str]]  # (name, type)
    ops: list["Op"]


@dataclasses.dataclass
class Op:
    name: str
    results: list[str]
    operands: list[str]
    successors: list[str]
    attrs: dict[str, str]  # properties and attributes: name -> value text
    regions: list[list[Block]]
    operand_types: list[str]
    result_types: list[str]
    line: int

    def attr(self, key: str, default=None):
        """An attribute as a Python value: `5 : i32` -> 5, `@sym` -> "sym", `"s"` -> "s",
        `array<i64: 1, 2>` -> [1, 2], `true` -> True; other text as it is."""
        if key not in self.attrs:
            return default
        return attr_value(self.attrs[key])

    def walk(self):
        yield self
        for region in self.regions:
            for block in region:
                for op in block.ops:
                    yield from op.walk()

    @property
    def body(self) -> list["Op"]:
        """The ops of the first block of the first region."""
        return self.regions[0][0].ops if self.regions and self.regions[0] else []


_INT = re.compile(r"^(-?\d+)\s*(?::\s*\w+)?$")
_ARRAY = re.compile(r"^array<\w+(?::\s*([-\d,\s]*))?>$")


def attr_value(text: str):
    t = text.strip()
    m = _INT.match(t)
    if m:
        return int(m.group(1))
    if t in ("true", "false"):
        return t == "true"
    if t.startswith("@"):
        return t[1:]
    if t.startswith('"') and t.endswith('"'):
        return t[1:-1]
    m = _ARRAY.match(t)
    if m:
        return [int(x) for x in (m.group(1) or "").split(",") if x.strip()]
    return t


_CLOSE = {"(": ")", "[": "]", "{": "}", "<": ">"}


class _Reader:
    def __init__(self, text: str):
        # drop comments and location suffixes, which the reader never needs
        text = re.sub(r"//[^\n]*", "", text)
        text = re.sub(r"\s*loc\((?:[^()]|\([^()]*\))*\)", "", text)
        self.s = text
        self.i = 0

    def error(self, what: str):
        line = self.s.count("\n", 0, self.i) + 1
        near = self.s[self.i : self.i + 60].replace("\n", " ")
        raise ParseError(f"line {line}: {what}, at: {near!r}")

    def ws(self):
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def peek(self, lit: str) -> bool:
        self.ws()
        return self.s.startswith(lit, self.i)

    def take(self, lit: str):
        if not self.peek(lit):
            self.error(f"expected {lit!r}")
        self.i += len(lit)

    def balanced(self) -> str:
        """The text of one bracketed group starting here (quotes respected), brackets included."""
        self.ws()
        start, depth, quote = self.i, 0, False
        while self.i < len(self.s):
            c = self.s[self.i]
            if quote:
                if c == "\\":
                    self.i += 1
                elif c == '"':
                    quote = False
            elif c == '"':
                quote = True
            elif c in "([{<":
                depth += 1
            elif c in ")]}>":
                # `->` inside a type is not a closing bracket
                if not (c == ">" and self.s[self.i - 1] == "-"):
                    depth -= 1
            self.i += 1
            if depth == 0 and not quote:
                return self.s[start : self.i]
        self.error("unbalanced brackets")

    def regex(self, pattern: str) -> str | None:
        self.ws()
        m = re.compile(pattern).match(self.s, self.i)
        if not m:
            return None
        self.i = m.end()
        return m.group(0)

    # -- the grammar --------------------------------------------------------------------------------
    def top(self) -> Op:
        self.ws()
        while self.peek("#"):  # attribute aliases at the top: #name = ...
            self.regex(r"#[\w.$-]+\s*=")
            self.value_until_newline()
        op = self.op()
        return op

    def value_until_newline(self):
        self.ws()
        if self.s[self.i] in "([{<":
            self.balanced()
        while self.i < len(self.s) and self.s[self.i] != "\n":
            if self.s[self.i] in "([{<":
                self.balanced()
            else:
                self.i += 1

    def op(self) -> Op:
        line = self.s.count("\n", 0, self.i) + 1
        results = []
        if self.peek("%"):
            names = self.regex(
                r"%[\w#.$-]+(?::\d+)?(?:\s*,\s*%[\w#.$-]+(?::\d+)?)*\s*="
            )
            if names is None:
                self.error("expected results")
            for n in names.rstrip("=").split(","):
                n = n.strip()
                if ":" in n:
                    base, count = n.split(":")
                    results += [f"{base}#{k}" for k in range(int(count))]
                else:
                    results.append(n)
        name = self.regex(r'"[\w.]+"')
        if name is None:
            self.error("expected an op name in quotes (is this the generic form?)")
        operands = []
        self.take("(")
        if not self.peek(")"):
            while True:
                v = self.regex(r"%[\w.$-]+(?:#\d+)?")
                if v is None:
                    self.error("expected an operand")
                operands.append(v)
                if not self.peek(","):
                    break
                self.take(",")
        self.take(")")
        successors = []
        if self.peek("["):
            grp = self.balanced()
            successors = [x.strip() for x in grp[1:-1].split(",") if x.strip()]
        attrs = {}
        if self.peek("<{"):
            self.i += 1  # "<": the properties dictionary follows
            attrs.update(self.dictionary())
            self.take(">")
        regions = []
        if self.peek("("):
            self.take("(")
            while True:
                regions.append(self.region())
                if not self.peek(","):
                    break
                self.take(",")
            self.take(")")
        if self.peek("{"):
            attrs.update(self.dictionary())
        self.take(":")
        operand_types, result_types = self.function_type()
        return Op(
            name[1:-1],
            results,
            operands,
            successors,
            attrs,
            regions,
            operand_types,
            result_types,
            line,
        )

    def dictionary(self) -> dict[str, str]:
        text = self.balanced()[1:-1]
        out = {}
        for item in _split_top(text):
            if "=" in item:
                k, v = item.split("=", 1)
                out[k.strip()] = v.strip()
            elif item.strip():
                out[item.strip()] = "unit"
        return out

    def function_type(self):
        ins = self.balanced()
        self.take("->")
        self.ws()
        if self.peek("("):
            outs = self.balanced()[1:-1]
        else:
            outs = self.regex(r"!?[\w.]+") or ""
            if self.s.startswith(
                "<", self.i
            ):  # memref<...>, vector<...>: the balanced form
                outs += self.balanced()
        return _split_top(ins[1:-1]), _split_top(outs)

    def region(self) -> list[Block]:
        self.take("{")
        blocks = []
        current = Block("^bb0", [], [])
        while not self.peek("}"):
            if self.peek("^"):
                if current.ops or blocks or current.args:
                    blocks.append(current)
                label = self.regex(r"\^[\w.$-]+")
                args = []
                if self.peek("("):
                    for item in _split_top(self.balanced()[1:-1]):
                        n, t = item.split(":", 1)
                        args.append((n.strip(), t.strip()))
                self.take(":")
                current = Block(label, args, [])
                continue
            current.ops.append(self.op())
        self.take("}")
        blocks.append(current)
        return blocks


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets and quotes."""
    out, depth, cur, quote = [], 0, "", False
    prev = ""
    for c in text:
        if quote:
            quote = c != '"' or prev == "\\"
        elif c == '"':
            quote = True
        elif c in "([{<":
            depth += 1
        elif c in ")]}>" and not (c == ">" and prev == "-"):
            depth -= 1
        if c == "," and depth == 0 and not quote:
            out.append(cur.strip())
            cur = ""
        else:
            cur += c
        prev = c
    if cur.strip():
        out.append(cur.strip())
    return out


def parse(text: str) -> Op:
    """The top op (builtin.module) of a module in generic form."""
    return _Reader(text).top()


def memref_shape(type_text: str) -> tuple[tuple[int, ...], str, int]:
    """memref<8x8xbf16, 2 : i32> -> ((8, 8), "bf16", 2): shape, element type, memory space."""
    m = re.fullmatch(
        r"memref<((?:\d+x)*)(\w+)(?:,\s*(\d+)\s*:\s*i32)?>", type_text.strip()
    )
    if not m:
        raise ParseError(f"not a plain memref type: {type_text}")
    shape = tuple(int(d) for d in m.group(1).split("x") if d)
    return shape, m.group(2), int(m.group(3) or 0)
