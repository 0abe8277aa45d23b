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


def _top_level_imports(path: str) -> set[str]:
    """The first component of every module a file imports (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
    return found


def test_the_emulator_imports_nothing_of_the_host_package():
    """The emulator is the floor: no file under emulator/ but its tests imports int4awq or host, which
    use it (the tools that did, upstream_check and calibrate_kernels, live in host/; the tests that set
    the emulator beside the real compiler reach it through int4awq's driver)."""
    emulator = os.path.dirname(AIR)
    bad = []
    for dirpath, _, files in os.walk(emulator):
        if os.path.relpath(dirpath, emulator).split(os.sep)[0] == "tests":
            continue
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                up = _top_level_imports(path) & {"int4awq", "host"}
                if up:
                    bad.append(f"{os.path.relpath(path, emulator)}: {sorted(up)}")
    assert bad == []


def test_the_host_tools_import_one_way():
    """host/'s modules import each other without a circle (host/aircc_check.py and host/bringup.py had
    imported each other)."""
    host = os.path.join(os.path.dirname(os.path.dirname(AIR)), "host")
    mods = {
        f[:-3]: os.path.join(host, f) for f in os.listdir(host) if f.endswith(".py")
    }
    deps = {}
    for name, path in mods.items():
        found = set()
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "host":
                    found |= {a.name for a in node.names}
                elif node.module.startswith("host."):
                    found.add(node.module.split(".")[1])
                elif node.module in mods:
                    found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[-1] for a in node.names if a.name in mods}
        deps[name] = {d for d in found if d in mods and d != name}

    def reaches(src, dst, seen=()):
        return any(
            d == dst or (d not in seen and reaches(d, dst, seen + (d,)))
            for d in deps.get(src, ())
        )

    assert "kernel_probe" in deps["aircc_check"]  # the walk sees host's imports
    assert [m for m in deps if reaches(m, m)] == []
