"""Local git histories that stand in for a llama.cpp repository (the git path of ``ladder
bisect``, offline): the default source's tree as the first commit, then commits that change
nothing measured, one that does not build, and real slowdowns of the CPU backend's code.

Used by tests/test_e2e.py (the bisections CI runs) and measurements/bisect_walk.py (the
8-commit walk of issue 61, timed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from workflow_runner import shared_resources

GGML_CPU = Path("ggml") / "src" / "ggml-cpu" / "ggml-cpu.c"

# every mul_mat chunk's dot products, computed three times: the floor's path, ~3x slower
TRIPLE_LOOP = ("                for (int64_t ir0 = iir0; ir0 < iir0 + blck_0 && ir0 < ir0_end; "
               "ir0 += num_rows_per_vec_dot) {\n                    vec_dot(")
# after every node of the compute graph: the place a bounded spin costs every token alike
NODE_DONE = "            ggml_compute_forward(&params, node);\n        }\n"


def base_tree() -> Path:
    """The default source's llama.cpp tree, as fetched into the shared resources."""
    for p in (shared_resources() / "sources").glob("*/source.json"):
        d = json.loads(p.read_text())
        if (d.get("status", "ok") == "ok" and d["identity"]["kind"] == "pypi"
                and not d["identity"].get("patches")):
            return Path(d["root"])
    raise FileNotFoundError(f"no fetched pypi source under {shared_resources() / 'sources'}")


def start(repo: Path) -> None:
    """A repository whose first commit is the base tree."""
    subprocess.run(["cp", "-r", str(base_tree()), str(repo)], check=True)
    subprocess.run(["rm", "-rf", str(repo / ".git")], check=True)  # the sdist's submodule link
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    commit(repo, "the base: llama.cpp 0c1e570 as vendored by llama-cpp-python 0.3.36")


def commit(repo: Path, message: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam",
                    message], cwd=repo, check=True)


def note(repo: Path, path: str, line: str, message: str) -> None:
    """A commit that changes nothing the build compiles."""
    with open(repo / path, "a") as f:
        f.write(line + "\n")
    commit(repo, message)


def spin(text: str, micros: int) -> str:
    """ggml-cpu.c with thread 0 spinning on the clock for ``micros`` µs after every graph node
    (the other threads wait at the node's barrier): a bounded, fixed cost per node, so a
    moderate slowdown of decode (a few hundred nodes per token) and a smaller one of prefill,
    sized by ``micros``."""
    assert text.count(NODE_DONE) == 1
    return text.replace(NODE_DONE, NODE_DONE + (
        "        if (state->ith == 0) {\n"
        f"            const int64_t spin_until = ggml_time_us() + {micros};\n"
        "            while (ggml_time_us() < spin_until) { }\n"
        "        }\n"))


def slow_history(repo: Path) -> Path:
    """Six commits: the base, a README line, a commit that does not compile (a syntax error in
    ggml-cpu.c) and the one that fixes it, then the commit that really slows a kernel path
    (``TRIPLE_LOOP``), then a note in the docs."""
    start(repo)
    note(repo, "README.md", "a line", "docs: a line in the README")
    mm = repo / GGML_CPU
    text = mm.read_text()
    mm.write_text(text + "\nthis does not compile\n")
    commit(repo, "ggml-cpu: a commit that does not build")
    mm.write_text(text)
    commit(repo, "ggml-cpu: build again")
    assert text.count(TRIPLE_LOOP) == 1
    mm.write_text(text.replace(TRIPLE_LOOP, "                for (int rep = 0; rep < 3; ++rep)\n"
                               + TRIPLE_LOOP))
    commit(repo, "ggml-cpu: compute each mul_mat chunk's dot products three times")
    note(repo, "docs/build.md", "a note", "docs: a note on building")
    return repo


def spin_history(repo: Path, commits: int, slow_at: int, micros: int) -> Path:
    """``commits`` commits: the base, then notes in the docs, the one at index ``slow_at``
    adding the node spin (``spin``) of ``micros`` µs: a moderate step in one commit, the rest
    of the history unchanged."""
    assert 0 < slow_at < commits
    start(repo)
    for i in range(1, commits):
        if i == slow_at:
            mm = repo / GGML_CPU
            mm.write_text(spin(mm.read_text(), micros))
            commit(repo, f"ggml-cpu: spin {micros} us after every graph node")
        else:
            note(repo, "docs/build.md", f"note {i}", f"docs: note {i}")
    return repo
