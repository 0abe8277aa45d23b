# SPDX-License-Identifier: MIT
"""The emulator's modules import one way: no module of emulator/air reaches itself through its imports
(module-level or inside functions), so each can be read from the bottom up."""

import ast
import os

AIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "air")


def modules() -> dict[str, str]:
    """Dotted name (air.emu.types) -> path, for every module of the air package."""
    out = {}
    for dirpath, _, files in os.walk(AIR):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, os.path.dirname(AIR))[:-3]
                name = rel.replace(os.sep, ".").removesuffix(".__init__")
                out[name] = path
    return out


def imports(mods: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (a name imported from a package counts as its
    submodule when there is one)."""
    deps = {}
    for name, path in mods.items():
        package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = (
                    ".".join(base + [node.module] if node.module else base)
                    if node.level
                    else node.module
                )
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    found.add(sub if sub in mods else target)
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        deps[name] = {d for d in found if d in mods and d != name}
    return deps


def test_no_module_of_the_emulator_imports_itself_back():
    deps = imports(modules())

    def reaches(src, dst, seen=()):
        return any(
            d == dst or (d not in seen and reaches(d, dst, seen + (d,)))
            for d in deps.get(src, ())
        )

    # the walk sees what it must: air.emu.types takes its element types from air.ir
    assert "air.ir" in deps["air.emu.types"]
    assert [m for m in deps if reaches(m, m)] == []
