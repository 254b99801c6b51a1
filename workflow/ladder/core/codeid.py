"""A rule's code identity, derived rather than listed by hand (issue 32).

A ``script:`` rule runs its adapter in ``scripts/`` and, through it, the modules of this package
it imports, directly or through each other. ``code_modules`` walks those imports with ``ast``
(imports inside functions included; a package file another module runs as a program, named
as a ``"<module>.py"`` string, e.g. the lldb driver; and a ``"ladder.<module>:<function>"``
string, a function imported by name, e.g. a report section's builder); ``code_hash`` hashes
each file's syntax tree with its docstrings left out (and, where annotations are never
evaluated, what only a type checker reads: ``_NoTypes``), so a comment, a docstring, a type or
a reformatting reruns nothing, while any change of logic reruns every rule whose code reaches
it.

A module is known by its own name wherever it lives in the package (subpackages included, two
modules of one name are an error), and its syntax tree is hashed as if it had not moved: package
imports and ``"ladder.<...>.<module>:<fn>"`` strings name the module by leaf, consecutive
``from ladder import`` statements count as one, and a ``Path(__file__)`` parent chain is counted
from the package's folder. So moving modules between subpackages (with the import edits a move
needs) reruns nothing (tests/test_codeid.py moves every module and checks every rule's hash)."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable

PACKAGE = "ladder"
_REF = re.compile(rf"{PACKAGE}\.((?:\w+\.)*)(\w+):(\w+)")
PACKAGE_DIR = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = PACKAGE_DIR.parent.parent / "scripts"


@lru_cache(maxsize=None)
def _index(package_dir: Path) -> dict[str, Path]:
    """Every module of the package, subpackages included, by its own (leaf) name: a module is
    known by that name wherever it lives, so moving it between subpackages keeps its identity.
    Two modules of one name would be ambiguous: an error."""
    out: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")):
        if path.name == "__init__.py" or "__pycache__" in path.parts:
            continue
        if path.stem in out:
            raise ValueError(f"two package modules named {path.stem!r}: {out[path.stem]} and "
                             f"{path} (code identity knows a module by its name)")
        out[path.stem] = path
    return out


def _module_file(name: str) -> Path | None:
    return _index(PACKAGE_DIR).get(name)


def _leaf(dotted: str) -> str | None:
    """The module a dotted name below the package names (its last part that is a module):
    ``ladder.measuring.bench`` -> ``bench``; None for the package or a subpackage."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE:
        return None
    return next((p for p in reversed(parts[1:]) if _module_file(p)), None)


@lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def direct_imports(path: Path) -> frozenset[str]:
    """The package modules one file imports (or runs as a program by file name)."""
    return _imports_in(_tree(path))


@lru_cache(maxsize=None)
def _imports_in(tree: ast.Module) -> frozenset[str]:
    """Memoised by the parsed tree (itself memoised by path): a parse reaches each module from
    ~20 rules."""
    out: set[str] = set()
    for node in _walk_run_time(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                leaf = _leaf(alias.name)
                if leaf:
                    out.add(leaf)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != PACKAGE:
                continue
            leaf = _leaf(node.module)
            if leaf:
                out.add(leaf)
            else:  # from ladder import a, b (or from ladder.<subpackage> import a, b)
                out.update(a.name for a in node.names)
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and node.value.endswith(".py") and "/" not in node.value
              and not node.value.startswith("__")):  # "lldb_driver.py", never "__init__.py"
            out.add(node.value[:-3])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            ref = _REF.fullmatch(node.value)  # "ladder.<module>:<function>", imported by name
            if ref:
                out.add(ref.group(2))
    return frozenset(m for m in out if _module_file(m))


def _walk_run_time(tree: ast.AST) -> list[ast.AST]:
    """Every node ``ast.walk`` gives but those under ``if TYPE_CHECKING:``: an import a type
    checker alone reads (an annotation's class) never runs, so it is no part of a rule's code."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            todo += node.orelse
            continue
        out.append(node)
        todo += ast.iter_child_nodes(node)
    return out


def _type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def code_modules(script: str, *entries: str) -> list[str]:
    """Every package module the adapter ``scripts/<script>.py`` reaches (and, with ``entries``,
    the modules it imports by a name its rule gives it), sorted."""
    for entry in entries:
        if _module_file(entry) is None:
            raise ValueError(f"{script}: no package module {entry!r} (code identity)")
    return _closure({*direct_imports(SCRIPTS_DIR / f"{script}.py"), *entries})


def module_reach(module: str) -> list[str]:
    """Every package module ``ladder.<module>`` reaches (itself included), sorted."""
    return _closure({module})


def _closure(start: Iterable[str]) -> list[str]:
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


class _NoTypes(ast.NodeTransformer):
    """What only a type checker reads, in a module whose annotations are never evaluated
    (``from __future__ import annotations``): a function's argument and return annotations, a
    variable's annotation outside a class body (``x: T = v`` is ``x = v``; a bare ``x: T`` is
    nothing), and ``cast(T, v)``, which returns ``v``. A class body's annotations stay: they
    are its fields (a dataclass's, a TypedDict's, ``ClassVar`` or not). So a type-only edit
    reruns nothing (issue 60), while the code a measurement executes is hashed exactly."""

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
        node.returns = None
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        for st in node.body:  # its own annotations are fields: their values still visited
            if isinstance(st, ast.AnnAssign):
                if st.value is not None:
                    st.value = self.visit(st.value)
            else:
                self.visit(st)
        node.decorator_list = [self.visit(d) for d in node.decorator_list]
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return ast.Assign(targets=[node.target], value=self.visit(node.value),
                          type_comment=None)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if (len(node.args) == 2 and not node.keywords
                and ((isinstance(f, ast.Name) and f.id == "cast")
                     or (isinstance(f, ast.Attribute) and f.attr == "cast"
                         and isinstance(f.value, ast.Name) and f.value.id == "typing"))):
            return node.args[1]
        return node


def _postponed_annotations(tree: ast.Module) -> bool:
    return any(isinstance(st, ast.ImportFrom) and st.module == "__future__"
               and any(a.name == "annotations" for a in st.names) for st in tree.body)


def _fill_empty(tree: ast.AST) -> ast.AST:
    """A body a removed bare annotation left empty holds ``pass``."""
    for node in ast.walk(tree):
        if getattr(node, "body", None) == []:
            node.body = [ast.Pass()]  # type: ignore[attr-defined]
    return tree


class _WhereItLives(ast.NodeTransformer):
    """What a move between subpackages changes and the logic does not: a package import names
    its module by leaf (``ladder.measuring.bench`` -> ``ladder.bench``; ``from ladder.measuring
    import bench`` -> ``from ladder import bench``), a ``"ladder.<...>.<module>:<fn>"`` string
    likewise, and a ``Path(__file__)`` parent chain that climbs above the file's own folder is
    counted from the package's folder (a module ``depth`` folders down climbs ``depth`` more)."""

    def __init__(self, depth: int):
        self.depth = depth

    def _name(self, dotted: str) -> str:
        leaf = _leaf(dotted)
        return f"{PACKAGE}.{leaf}" if leaf else PACKAGE

    def visit_Import(self, node: ast.Import) -> ast.AST:
        for alias in node.names:
            if alias.name.split(".")[0] == PACKAGE:
                alias.name = self._name(alias.name)
        return node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
        if node.level == 0 and node.module and node.module.split(".")[0] == PACKAGE:
            node.module = self._name(node.module)
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        ref = _REF.fullmatch(node.value) if isinstance(node.value, str) else None
        if ref and ref.group(1):
            node.value = f"{PACKAGE}.{ref.group(2)}:{ref.group(3)}"
        return node

    def _climb(self, node: ast.AST) -> ast.AST:
        """``.parent`` x n and ``.parents[k]`` on ``Path(__file__)[.resolve()]``."""
        if not self.depth:
            return node
        steps, base = 0, node
        if (isinstance(base, ast.Subscript) and isinstance(base.value, ast.Attribute)
                and base.value.attr == "parents" and isinstance(base.slice, ast.Constant)
                and isinstance(base.slice.value, int)):
            if _file_path(base.value.value) and base.slice.value >= self.depth:
                base.slice.value -= self.depth
            return node
        while isinstance(base, ast.Attribute) and base.attr == "parent":
            steps, base = steps + 1, base.value
        if steps > self.depth and _file_path(base):
            for _ in range(self.depth):
                node = node.value  # type: ignore[attr-defined]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        return self._climb(node) if node.attr == "parent" else self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        return self._climb(node)


def _file_path(node: ast.AST) -> bool:
    """``Path(__file__)`` or ``Path(__file__).resolve()``."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "resolve"):
        node = node.func.value
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "Path" and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id == "__file__")


def _depth(path: Path) -> int:
    try:
        return len(path.resolve().relative_to(PACKAGE_DIR.resolve()).parts) - 1
    except ValueError:  # a script: not in the package
        return 0


def logic_digest(path: Path) -> str:
    """A file's logic: its syntax tree without docstrings (comments and layout never reach it),
    with what a move between subpackages changes written as if it had not moved."""
    return _digest(str(path), _depth(path), path.read_text())


@lru_cache(maxsize=None)
def _digest(name: str, depth: int, text: str) -> str:
    """Memoised by file, depth and text: one workflow parse hashes ~20 rules whose code shares
    most modules (334 digests of ~60 files, three quarters of a parse's time, before)."""
    parsed = ast.parse(text, filename=name)
    tree: ast.AST = _NoDocstrings().visit(parsed)
    if _postponed_annotations(parsed):
        tree = _fill_empty(_NoTypes().visit(tree))
    tree = _merge_imports(_WhereItLives(depth).visit(tree))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _merge_imports(tree: ast.AST) -> ast.AST:
    """Consecutive ``from ladder import ...`` statements as one: a move splits ``from ladder
    import a, b`` by the subpackage each module went to, and the canonical names join again."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list):
                continue
            out: list[ast.stmt] = []
            for st in stmts:
                prev = out[-1] if out else None
                if (isinstance(st, ast.ImportFrom) and isinstance(prev, ast.ImportFrom)
                        and st.module == prev.module == PACKAGE and st.level == prev.level == 0):
                    prev.names = [*prev.names, *st.names]
                    continue
                out.append(st)
            setattr(node, field, out)
    return tree


def code_hash(script: str, *entries: str) -> str:
    """The identity of a script rule's code: its adapter and every module it reaches; with
    ``entries``, also every module those reach (an adapter that imports its entry by a name the
    rule gives it, e.g. a serving experiment's measuring module: only that one's code counts)."""
    if entries:
        return _code_hash(script, tuple(sorted(set(entries))))
    stored = code_hashes()
    return stored[script] if script in stored else _code_hash(script)


def code_hashes() -> dict[str, str]:
    """Every script's code identity, computed at once and kept in the package's
    ``__pycache__`` under the fingerprint of every package and script file (path and text): a
    workflow parse (every snakemake call, two per cluster job) reads them instead of
    re-deriving them; any edit anywhere is another fingerprint, so they are derived again."""
    return _stored_hashes(SCRIPTS_DIR, PACKAGE_DIR)


def _fingerprint(scripts_dir: Path, package_dir: Path) -> str:
    digest = hashlib.sha256()
    for base, pattern in ((scripts_dir, "*.py"), (package_dir, "**/*.py")):
        for path in sorted(base.glob(pattern)):
            if "__pycache__" in path.parts:
                continue
            digest.update(f"{base.name}/{path.relative_to(base)}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:24]


def _stored_hashes(scripts_dir: Path, package_dir: Path) -> dict[str, str]:
    store = package_dir / "__pycache__" / f"codeid-{_fingerprint(scripts_dir, package_dir)}.json"
    try:
        return dict(json.loads(store.read_text()))
    except (OSError, ValueError):
        pass
    hashes = {p.stem: _code_hash(p.stem) for p in sorted(scripts_dir.glob("*.py"))}
    try:  # best effort (a read-only checkout derives them every time)
        store.parent.mkdir(exist_ok=True)
        for old in store.parent.glob("codeid-*.json"):
            old.unlink(missing_ok=True)
        tmp = store.with_name(f"{store.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(hashes, sort_keys=True))
        os.replace(tmp, store)
    except OSError:
        pass
    return hashes


def _code_hash(script: str, entries: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256()
    digest.update(logic_digest(SCRIPTS_DIR / f"{script}.py").encode())
    for mod in code_modules(script, *entries):
        digest.update(mod.encode() + logic_digest(_module_file(mod)).encode())  # type: ignore[arg-type]
    return digest.hexdigest()[:12]
