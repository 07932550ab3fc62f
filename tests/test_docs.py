"""Every code block of README.md and docs/*.md runs, as a reader would run it.

Per file, the ```python blocks run in order in one fresh process sharing one namespace (a
block may use what an earlier one made), and the ```sh blocks run line by line in bash,
in a scratch directory where ``examples/`` is the repository's.  An HTML comment right
before a block (invisible in the rendered page) changes what happens to it:

``<!-- doctest: skip REASON -->``      not run (installs packages, needs a cluster, ...); the reason is
                                       required
``<!-- doctest: file NAME -->``        written to NAME in the scratch directory instead of run (a program
                                       that a later sh block runs)
``<!-- doctest: setup ... -->``        the Python lines between ``setup`` and ``-->`` run before the
                                       next python block, in its namespace (files it reads, say)
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                              if f.endswith(".md"))
CODE = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh", "console": "sh"}
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!-- doctest: (skip|file|setup)\b(.*)$")
TIMEOUT = 900


@dataclass
class Block:
    kind: str           # "python" or "sh"
    line: int           # 1-based line of the opening fence
    code: str
    skip: str | None = None
    file: str | None = None
    setup: list = field(default_factory=list)


def blocks(path):
    """The code blocks of one markdown file, with their markers."""
    lines = open(os.path.join(ROOT, path), encoding="utf-8").read().split("\n")
    out, pending, i = [], {}, 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line)
        if m:
            what, rest = m.group(1), m.group(2)
            if what == "setup":
                body = []
                i += 1
                while lines[i].strip() != "-->":
                    body.append(lines[i])
                    i += 1
                pending["setup"] = "\n".join(body)
            else:
                arg = rest.strip()
                assert arg.endswith("-->"), f"{path}:{i + 1}: a doctest marker ends on its line with -->"
                arg = arg[:-3].strip()
                need = "a reason" if what == "skip" else "a name"
                assert arg, f"{path}:{i + 1}: doctest {what} needs {need}"
                pending[what] = arg
            i += 1
            continue
        f = FENCE.match(line)
        if f:
            lang, start, body = f.group(1), i + 1, []
            i += 1
            while not FENCE.match(lines[i]) or FENCE.match(lines[i]).group(1):
                body.append(lines[i])
                i += 1
            if lang in CODE:
                b = Block(CODE[lang], start, "\n".join(body) + "\n", skip=pending.get("skip"),
                          file=pending.get("file"))
                if "setup" in pending:
                    b.setup.append(pending["setup"])
                out.append(b)
            else:
                assert not pending, f"{path}:{start}: a doctest marker before a block that is not code"
            pending = {}
            i += 1
            continue
        if line.strip() and pending:
            raise AssertionError(f"{path}:{i + 1}: a doctest marker must come right before its code block")
        i += 1
    return out


_DRIVER = """
import sys
ns = {"__name__": "__main__"}
for label, code in BLOCKS:
    print(f"--- {label}", flush=True)
    exec(compile(code, label, "exec"), ns)
"""


def _run_python(path, bs, cwd):
    items = []
    for b in bs:
        for s in b.setup:
            items.append((f"{path}:{b.line} (setup)", s))
        items.append((f"{path}:{b.line}", b.code))
    script = f"BLOCKS = {items!r}\n" + _DRIVER
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT)


def _run_sh(b, cwd):
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", b.code], cwd=cwd, capture_output=True,
                          text=True, timeout=TIMEOUT, env=env)


@pytest.mark.parametrize("path", DOCS)
def test_code_blocks_run(path, tmp_path):
    bs = blocks(path)
    os.symlink(os.path.join(ROOT, "examples"), tmp_path / "examples")
    for b in bs:
        if b.file:
            (tmp_path / b.file).write_text(b.code)
    py = [b for b in bs if b.kind == "python" and not b.skip and not b.file]
    if py:
        r = _run_python(path, py, tmp_path)
        assert r.returncode == 0, f"{path}: a python block failed\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    for b in bs:
        if b.kind == "sh" and not b.skip:
            r = _run_sh(b, tmp_path)
            assert r.returncode == 0, (f"{path}:{b.line}: the sh block failed\n{b.code}\n{r.stdout[-3000:]}\n"
                                       f"{r.stderr[-3000:]}")


def test_markers_are_parsed(tmp_path, monkeypatch):
    """The parser on a sample page: skip, file and setup reach the right blocks; a stray marker fails."""
    page = tmp_path / "page.md"
    page.write_text("text\n<!-- doctest: skip needs a cluster -->\n```sh\nsrun x\n```\n\n"
                    "<!-- doctest: file prog.py -->\n```python\nprint(1)\n```\n"
                    "<!-- doctest: setup\nopen('f', 'w').write('x')\n-->\n```python\nopen('f').read()\n```\n"
                    "```\nplain output\n```\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    a, b, c = blocks("page.md")
    assert (a.kind, a.skip) == ("sh", "needs a cluster")
    assert (b.kind, b.file, b.code) == ("python", "prog.py", "print(1)\n")
    assert c.setup == ["open('f', 'w').write('x')"] and c.skip is None and c.file is None
    page.write_text("<!-- doctest: skip -->\n```sh\nx\n```\n")
    with pytest.raises(AssertionError, match="needs a reason"):
        blocks("page.md")
    page.write_text("<!-- doctest: skip why -->\nsome text\n```sh\nx\n```\n")
    with pytest.raises(AssertionError, match="right before its code block"):
        blocks("page.md")
