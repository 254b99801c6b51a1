"""A rule's code identity, derived rather than listed by hand (issue 32).

A ``script:`` rule runs its adapter in ``scripts/`` and, through it, the modules of this package
it imports, directly or through each other. ``code_modules`` walks those imports with ``ast``
(imports inside functions included; a package file another module runs as a program, named
as a ``"<module>.py"`` string, e.g. the lldb driver; and a ``"ladder.<module>:<function>"``
string, a function imported by name, e.g. a report section's builder); ``code_hash`` hashes
each file's syntax tree with its docstrings left out, so a comment, a docstring or a
reformatting reruns nothing, while any change of logic reruns every rule whose code reaches
it."""

from __future__ import annotations

import ast
import hashlib
import re
from functools import lru_cache
from pathlib import Path

PACKAGE = "ladder"
_REF = re.compile(rf"{PACKAGE}\.(\w+):\w+")
PACKAGE_DIR = Path(__file__).resolve().parent
SCRIPTS_DIR = PACKAGE_DIR.parent.parent / "scripts"


def _module_file(name: str) -> Path | None:
    path = PACKAGE_DIR / f"{name}.py"
    return path if path.is_file() else None


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def direct_imports(path: Path) -> set[str]:
    """The package modules one file imports (or runs as a program by file name)."""
    out: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE and len(parts) > 1:
                    out.add(parts[1])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != PACKAGE:
                continue
            if len(parts) > 1:
                out.add(parts[1])
            else:  # from ladder import a, b
                out.update(a.name for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.endswith(".py") and "/" not in node.value):
            out.add(node.value[:-3])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = _REF.fullmatch(node.value)  # "ladder.<module>:<function>", imported by name
            if ref:
                out.add(ref.group(1))
    return {m for m in out if _module_file(m)}


def code_modules(script: str) -> list[str]:
    """Every package module the adapter ``scripts/<script>.py`` reaches, sorted."""
    return _closure(direct_imports(SCRIPTS_DIR / f"{script}.py"))


def module_reach(module: str) -> list[str]:
    """Every package module ``ladder.<module>`` reaches (itself included), sorted."""
    return _closure({module})


def _closure(start: set[str]) -> list[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        todo += direct_imports(_module_file(mod))  # type: ignore[arg-type]
    return sorted(seen)


class _NoDocstrings(ast.NodeTransformer):
    def _strip(self, node: ast.AST) -> ast.AST:
        self.generic_visit(node)
        body = getattr(node, "body", None)
        if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
        return node

    visit_Module = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _strip


def logic_digest(path: Path) -> str:
    """A file's logic: its syntax tree without docstrings (comments and layout never reach it)."""
    tree = _NoDocstrings().visit(ast.parse(path.read_text(), filename=str(path)))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def code_hash(script: str) -> str:
    """The identity of a script rule's code: its adapter and every module it reaches."""
    digest = hashlib.sha256()
    digest.update(logic_digest(SCRIPTS_DIR / f"{script}.py").encode())
    for mod in code_modules(script):
        digest.update(mod.encode() + logic_digest(_module_file(mod)).encode())  # type: ignore[arg-type]
    return digest.hexdigest()[:12]
