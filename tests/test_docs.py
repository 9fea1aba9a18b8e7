"""The documentation (README.md and docs/*.md) stays true to the code.

What is checked, and how:

1. ``docs/cli.md`` is what ``make docs`` generates now: the Typer generator runs with the
   Makefile's own arguments into a temporary file, which must equal the committed page
   (otherwise: run ``make docs``). The generator's output does not depend on the terminal; the
   test still fixes ``COLUMNS``, ``NO_COLOR`` and ``TERM`` as the Makefile does. The other checks
   skip this page: it is generated.
2. Commands and options. A ``websailor`` invocation is read from shell code blocks (``bash``,
   ``sh``, ``shell``, ``console``: backslash continuations, indented synopsis lines and ``...``
   lines continue the command above; quoted arguments and ``#`` comments are dropped) and from
   inline code that has the word ``websailor``; ``accelerate launch ... -m websailor.cli COMMAND``
   counts as one. Its words are walked down the click tree of
   ``typer.main.get_command(websailor.cli.app)`` with click's rules (an option that takes a value
   consumes the next word): every command and subcommand must exist, and every ``--option`` or
   ``-x`` must be an option of the command it is written after. Inline code that starts with an
   option (``--tools-url`` in prose) must name an option of at least one command. Options on the
   command lines of other programs are not checked (pip, accelerate, make, pytest, ...), except
   those of this repository's own scripts (``python benchmarks/x.py``, ``experiments/mini_pipeline.py``,
   ``python -m websailor.x``), which must appear as a quoted string in the script. The few
   options of such scripts written alone in prose are in ``SCRIPT_OPTIONS``, checked the same way.
3. Python blocks, at two levels. Every fenced ``python`` block gets the first: it compiles; each
   name of a ``from websailor... import`` imports for real; each call of an imported name, of a
   class's method or of a method on a value the block built from an imported class (its
   constructor, or a function whose return annotation is a class) binds against the real
   signature (``inspect.signature(...).bind`` with the block's arguments; a class binds its
   constructor); and a method called on such a value exists (on the class, or as an attribute
   its code sets). Running most blocks would need a built corpus or a model, so that is all they
   get. The second level is for blocks right after a ``<!-- docs-test: run -->`` comment, which
   need neither: they are also executed, in a temporary directory with a temporary
   ``$WEBSAILOR_HOME`` (the test ids name the page and line of each block).
4. Links and paths. Every relative Markdown link points at a file or directory of the
   repository, and its ``#anchor``, if any, at a heading of the target page; inline code that is
   a path of the repository (``websailor/...``, ``benchmarks/...``, ``experiments/...``, ``configs/...``,
   ``tests/...``, ``docs/...``) names one that exists.
5. The map: README.md stays at most 250 lines, and docs/README.md links every page of docs/.

A failure names the page, the line and the problem, for example
``docs/evaluation.md:42: websailor eval has no option --foo``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import shlex
import subprocess
import sys
import typing
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest
import typer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
GENERATED = DOCS / "cli.md"
SHELL_LANGS = {"bash", "sh", "shell", "console"}
RUN_MARKER = "<!-- docs-test: run -->"
# options of this repository's scripts written alone in prose: option -> the file that defines it
SCRIPT_OPTIONS = {
    "--kinds": "websailor/tools/web/fault_server.py",
    "--engine": "experiments/mini_pipeline.py",
    "--publish": "experiments/mini_pipeline.py",
    "--only": "experiments/mini_pipeline.py",
    "--until": "experiments/mini_pipeline.py",
    "--rl-lr": "experiments/mini_pipeline.py",
    "--sanity-lr": "experiments/mini_pipeline.py",
    "--sft-items": "experiments/mini_pipeline.py",
    "--items": "experiments/mini_pipeline.py",
    "--rl-steps": "experiments/mini_pipeline.py",
    "--rl-groups": "experiments/mini_pipeline.py",
    "--prefilter-sampler": "experiments/mini_pipeline.py",
    "--sft-config": "experiments/mini_pipeline.py",
    "--rl-config": "experiments/mini_pipeline.py",
    "--rl-items": "benchmarks/rl_overfit.py",
    "--flip-advantages": "benchmarks/rl_overfit.py",
    "--self-rollouts": "experiments/grounded.py",
    "--question-model": "experiments/transfer_opening.py",
    "--before": "benchmarks/synth_wording.py",
}
REPO_PATH = re.compile(r"^(?:websailor|benchmarks|experiments|configs|tests|docs)(?:/[\w.-]+)*/?$")
OPTION = re.compile(r"(?<![\w./:-])(--?[A-Za-z][\w-]*)")
QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
SHELL_STOPS = {"|", "||", "&&", ";", "&", ">", ">>", "<"}


@dataclass
class Block:
    lang: str
    line: int  # line of the first line inside the fence
    lines: list[str]
    run: bool = False


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    prose: list[tuple[int, str]] = field(default_factory=list)  # lines outside code blocks

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()


def parse_page(path: Path) -> Page:
    page = Page(path)
    fence: str | None = None
    block: Block | None = None
    previous = ""
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)", line)
        if fence is None and m:
            fence = m.group(1)
            block = Block(m.group(2).lower(), n + 1, [], run=previous.strip() == RUN_MARKER)
        elif fence is not None and line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            page.blocks.append(block)
            fence = block = None
        elif block is not None:
            block.lines.append(line)
        else:
            page.prose.append((n, line))
        if line.strip():
            previous = line
    return page


@cache
def pages() -> tuple[Page, ...]:
    paths = [ROOT / "README.md", *sorted(p for p in DOCS.glob("*.md") if p != GENERATED)]
    return tuple(parse_page(p) for p in paths)


def code_spans(page: Page) -> list[tuple[int, str]]:
    return [(n, m.group(2).strip()) for n, line in page.prose for m in CODE_SPAN.finditer(line)]


# --- the CLI --------------------------------------------------------------------------------


@cache
def cli_root() -> typing.Any:
    """The click command tree of the app (typer ships its own copy of click: the objects are
    read by duck typing, not checked against the ``click`` package's classes)."""
    import websailor.cli

    return typer.main.get_command(websailor.cli.app)


def option_params(cmd: typing.Any) -> dict[str, typing.Any]:
    out: dict[str, typing.Any] = {}
    for p in cmd.params:
        if p.param_type_name == "option":
            for name in [*p.opts, *p.secondary_opts]:
                out[name] = p
    return out


def takes_value(opt: typing.Any) -> bool:
    return opt is not None and not opt.is_flag and not opt.count


@cache
def all_options() -> frozenset[str]:
    names = {"--help"}

    def walk(cmd: typing.Any) -> None:
        names.update(option_params(cmd))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(cli_root())
    return frozenset(names)


def check_invocation(words: list[str], where: str) -> tuple[list[str], int]:
    """Walk the words after ``websailor``; returns (errors, options checked)."""
    cmd, path = cli_root(), "websailor"
    errors: list[str] = []
    checked = 0
    depth = 0  # brackets of a synopsis: a `|` inside them is an alternative, not a pipe
    skip_value = False
    for word in words:
        if word in SHELL_STOPS and depth == 0:
            break
        depth += word.count("[") - word.count("]")
        if skip_value:
            skip_value = False
            continue
        names = OPTION.findall(word.split("=", 1)[0])
        if word.lstrip("[({").startswith("-") and names:
            params = option_params(cmd)
            for name in names:
                checked += 1
                if name not in params and name != "--help":
                    errors.append(f"{where}: {path} has no option {name}")
            alternatives = "|" in word or word.endswith("]")
            skip_value = len(names) == 1 and "=" not in word and not alternatives and takes_value(params.get(names[0]))
            continue
        commands = getattr(cmd, "commands", None)
        if commands is not None:  # a group: the next word names a subcommand
            name = word.strip("[]{}()")
            if name in commands:
                cmd, path = commands[name], f"{path} {name}"
            else:
                errors.append(f"{where}: {path} has no command {name!r}")
                break
    return errors, checked


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """Logical command lines of a shell block, with the line each starts on."""
    out: list[tuple[int, str]] = []
    joining = False
    for i, raw in enumerate(block.lines):
        text = QUOTED.sub("ARG", raw)
        text = re.split(r"(?:^|\s)#", text, maxsplit=1)[0].rstrip()
        stripped = text.strip()
        if not stripped:
            joining = False
            continue
        continues = out and (joining or (raw[:1].isspace() and stripped[:1] in "[-.") or stripped.startswith("..."))
        if continues:
            out[-1] = (out[-1][0], f"{out[-1][1]} {stripped.rstrip(chr(92))}")
        else:
            out.append((block.line + i, stripped.rstrip(chr(92))))
        joining = text.endswith("\\")
    return out


def script_of(words: list[str]) -> tuple[Path | str | None, int]:
    """A script of this repository that a command line runs, and where its arguments start; a
    string names a script or module of the repository that does not exist."""
    for i, w in enumerate(words):
        if w.endswith(".py"):
            for candidate in (ROOT / w, ROOT / "benchmarks" / w, ROOT / "experiments" / w):
                if candidate.is_file():
                    return candidate, i + 1
            if REPO_PATH.match(w):
                return w, 0
        if w == "-m" and i + 1 < len(words) and words[i + 1].startswith("websailor."):
            module = words[i + 1]
            if module == "websailor.cli":
                return None, 0
            base = ROOT / module.replace(".", "/")
            for candidate in (base.with_suffix(".py"), base / "__main__.py"):
                if candidate.is_file():
                    return candidate, i + 2
            return module, 0
    return None, 0


def script_source(script: Path) -> str:
    """A script's text with that of the modules beside it that it imports (a script's options
    may be declared in a helper module of its folder, as mini_pipeline.py's are)."""
    text = script.read_text(encoding="utf-8")
    helpers = set(re.findall(r"^(?:from|import) (\w+)", text, re.MULTILINE))
    return text + "".join(
        (script.parent / f"{h}.py").read_text(encoding="utf-8")
        for h in sorted(helpers)
        if (script.parent / f"{h}.py").is_file()
    )


def check_command_line(text: str, where: str) -> tuple[list[str], int, int]:
    """Errors, websailor invocations and options checked on one command line."""
    words = QUOTED.sub("ARG", text).split()
    for i, w in enumerate(words):
        if w == "websailor" or w.endswith("/websailor") or (w == "websailor.cli" and i and words[i - 1] == "-m"):
            errors, checked = check_invocation(words[i + 1 :], where)
            return errors, 1, checked
    script, start = script_of(words)
    if script is None:
        return [], 0, 0
    if isinstance(script, str):
        return [f"{where}: {script} does not exist"], 0, 0
    source = script_source(script)
    errors, checked = [], 0
    for w in words[start:]:
        if w in SHELL_STOPS:
            break
        for name in OPTION.findall(w) if w.lstrip("[").startswith("-") else []:
            checked += 1
            if f'"{name}"' not in source and f"'{name}'" not in source:
                errors.append(f"{where}: {script.relative_to(ROOT)} has no option {name}")
    return errors, 0, checked


def check_commands(page: Page) -> tuple[list[str], int, int]:
    errors: list[str] = []
    invocations = options = 0
    lines = [(n, text) for b in page.blocks if b.lang in SHELL_LANGS for n, text in shell_lines(b)]
    lines += [(n, span) for n, span in code_spans(page) if not span.startswith("-")]
    for n, text in lines:
        e, i, o = check_command_line(text, f"{page.name}:{n}")
        errors += e
        invocations += i
        options += o
    for n, span in code_spans(page):
        if not span.startswith("-"):
            continue
        for name in OPTION.findall(span):
            options += 1
            if name in SCRIPT_OPTIONS:
                source = script_source(ROOT / SCRIPT_OPTIONS[name])
                if f'"{name}"' not in source:
                    errors.append(f"{page.name}:{n}: {SCRIPT_OPTIONS[name]} has no option {name}")
            elif name not in all_options():
                errors.append(f"{page.name}:{n}: no websailor command has an option {name}")
    return errors, invocations, options


# --- Python blocks --------------------------------------------------------------------------

_SELF = object()


def _is_ours(obj: object) -> bool:
    module = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    return isinstance(module, str) and module.split(".")[0] == "websailor"


def _instance_attribute(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` may carry ``name``: a field, an annotation, or ``self.name``."""
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}) or name in getattr(klass, "model_fields", {}):
            return True
        try:
            if re.search(rf"\bself\.{re.escape(name)}\b", inspect.getsource(klass)):
                return True
        except (OSError, TypeError):
            continue
    return False


class BlockChecker:
    """Imports, assignments and calls of one block, in order; see the module docstring."""

    def __init__(self, where: str, first_line: int) -> None:
        self.where, self.first_line = where, first_line
        self.env: dict[str, tuple[str, object]] = {}  # name -> ("obj", object) | ("inst", class)
        self.errors: list[str] = []
        self.calls = 0

    def at(self, node: ast.AST) -> str:
        return f"{self.where}:{self.first_line + getattr(node, 'lineno', 1) - 1}"

    def infer(self, node: ast.AST) -> tuple[str, object] | None:
        if isinstance(node, ast.Name):
            return self.env.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.infer(node.value)
            if base and base[0] == "obj" and inspect.ismodule(base[1]) and hasattr(base[1], node.attr):
                return "obj", getattr(base[1], node.attr)
            return None
        if isinstance(node, ast.Call):
            target = self.callee(node.func)
            if target is None:
                return None
            fn, _ = target
            if inspect.isclass(fn):
                return "inst", fn
            try:
                returned = typing.get_type_hints(fn).get("return")
            except Exception:
                return None
            return ("inst", returned) if inspect.isclass(returned) and _is_ours(returned) else None
        return None

    def callee(self, func: ast.AST) -> tuple[object, bool] | None:
        """The callable a call reaches and whether ``self`` must be supplied."""
        if isinstance(func, ast.Name):
            got = self.env.get(func.id)
            if got is None:
                return None
            kind, obj = got
            if kind == "inst":
                return getattr(obj, "__call__", None), True  # noqa: B004
            return (obj, False) if callable(obj) else None
        if isinstance(func, ast.Attribute):
            base = self.infer(func.value)
            if base is None:
                return None
            kind, obj = base
            if kind == "obj":
                if not hasattr(obj, func.attr):
                    self.errors.append(f"{self.at(func)}: {getattr(obj, '__name__', obj)} has no attribute {func.attr}")
                    return None
                return getattr(obj, func.attr), False
            raw = inspect.getattr_static(obj, func.attr, None)
            if raw is None:  # an instance attribute (set as self.attr, or a field) is not checked
                if not _instance_attribute(obj, func.attr):
                    self.errors.append(f"{self.at(func)}: {obj.__name__} has no attribute {func.attr}")
                return None
            if isinstance(raw, (staticmethod, classmethod)):
                return getattr(obj, func.attr), False
            return (raw, True) if inspect.isfunction(raw) else None
        if isinstance(func, ast.Call):
            got = self.infer(func)
            if got and got[0] == "inst":
                return getattr(got[1], "__call__", None), True  # noqa: B004
        return None

    def bind(self, call: ast.Call) -> None:
        target = self.callee(call.func)
        if target is None or target[0] is None or not _is_ours(target[0]):
            return
        fn, needs_self = target
        if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
            return
        args = [_SELF] * needs_self + [self.literal(a) for a in call.args]
        kwargs = {k.arg: self.literal(k.value) for k in call.keywords}
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return
        self.calls += 1
        try:
            sig.bind(*args, **kwargs)
        except TypeError as e:
            name = getattr(fn, "__qualname__", repr(fn))
            self.errors.append(f"{self.at(call)}: {ast.unparse(call)} does not match {name}{sig}: {e}")

    @staticmethod
    def literal(node: ast.AST) -> object:
        try:
            return ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return _SELF

    def run(self, tree: ast.Module) -> None:
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom) and (stmt.module or "").split(".")[0] == "websailor":
                self.import_from(stmt)
                continue
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.name.split(".")[0] == "websailor":
                        self.import_module(alias.name, stmt)
                continue
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call):
                    self.bind(node)
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                got = self.infer(stmt.value)
                if got is not None:
                    self.env[stmt.targets[0].id] = got
                else:
                    self.env.pop(stmt.targets[0].id, None)

    def import_module(self, name: str, node: ast.AST) -> object | None:
        try:
            return importlib.import_module(name)
        except ImportError as e:
            self.errors.append(f"{self.at(node)}: cannot import {name}: {e}")
            return None

    def import_from(self, stmt: ast.ImportFrom) -> None:
        module = self.import_module(stmt.module, stmt)
        if module is None:
            return
        for alias in stmt.names:
            if hasattr(module, alias.name):
                obj = getattr(module, alias.name)
            else:
                try:
                    obj = importlib.import_module(f"{stmt.module}.{alias.name}")
                except ImportError:
                    self.errors.append(f"{self.at(stmt)}: cannot import {alias.name} from {stmt.module}")
                    continue
            self.env[alias.asname or alias.name] = ("obj", obj)


def python_blocks() -> list[tuple[Page, Block]]:
    return [(p, b) for p in pages() for b in p.blocks if b.lang == "python"]


def check_python(page: Page, block: Block) -> tuple[list[str], int]:
    where = page.name
    source = "\n".join(block.lines)
    try:
        tree = ast.parse(source)
        compile(tree, f"{where}:{block.line}", "exec")
    except SyntaxError as e:
        return [f"{where}:{block.line + (e.lineno or 1) - 1}: the python block does not compile: {e.msg}"], 0
    checker = BlockChecker(where, block.line)
    checker.run(tree)
    return checker.errors, checker.calls


# --- links ----------------------------------------------------------------------------------


def slug(heading: str) -> str:
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in parse_page(path).prose:
        m = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if m:
            s = slug(m.group(1))
            out.add(s if s not in seen else f"{s}-{seen[s]}")
            seen[s] = seen.get(s, 0) + 1
    return frozenset(out)


def check_links(page: Page) -> tuple[list[str], int]:
    errors: list[str] = []
    checked = 0
    for n, line in page.prose:
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            checked += 1
            path_part, _, anchor = target.partition("#")
            resolved = (page.path.parent / path_part).resolve() if path_part else page.path
            if not resolved.is_relative_to(ROOT):
                errors.append(f"{page.name}:{n}: link {target} points outside the repository")
            elif not resolved.exists():
                errors.append(f"{page.name}:{n}: link {target} points at nothing")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                errors.append(f"{page.name}:{n}: link {target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    for n, span in code_spans(page):
        if REPO_PATH.match(span) and not any(part.startswith(".") for part in span.split("/")):
            checked += 1
            if not (ROOT / span).exists():
                errors.append(f"{page.name}:{n}: {span} does not exist")
    return errors, checked


# --- the tests ------------------------------------------------------------------------------


def generator_command(output: Path) -> list[str]:
    """``make docs``'s Typer command, read from the Makefile, writing to ``output``."""
    recipe = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    line = next(x for x in recipe.splitlines() if " utils docs " in x)
    words = shlex.split(line)
    start = next(i for i, w in enumerate(words) if w.endswith("/typer"))
    args = words[start + 1 :]
    args[args.index("--output") + 1] = str(output)
    return [sys.executable, "-m", "typer", *args]


def test_cli_reference_is_current(tmp_path: Path) -> None:
    fresh = tmp_path / "cli.md"
    env = {**os.environ, "COLUMNS": "80", "NO_COLOR": "1", "TERM": "dumb"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    done = subprocess.run(generator_command(fresh), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert fresh.read_text(encoding="utf-8") == GENERATED.read_text(encoding="utf-8"), (
        "docs/cli.md is stale: run `make docs`"
    )


def test_commands_and_options_exist() -> None:
    errors = [e for page in pages() for e in check_commands(page)[0]]
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize("page,block", python_blocks(), ids=lambda x: getattr(x, "name", None) or str(x.line))
def test_python_block_imports_and_binds(page: Page, block: Block) -> None:
    errors, _ = check_python(page, block)
    assert not errors, "\n".join(errors)


@pytest.mark.parametrize(
    "page,block", [(p, b) for p, b in python_blocks() if b.run], ids=lambda x: getattr(x, "name", None) or str(x.line)
)
def test_python_block_runs(page: Page, block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile("\n".join(block.lines), f"{page.name}:{block.line}", "exec"), {"__name__": "__docs__"})


def test_links_and_paths_exist() -> None:
    errors = [e for page in pages() for e in check_links(page)[0]]
    assert not errors, "\n".join(errors)


def test_readme_and_map() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) <= 250, f"README.md has {len(readme)} lines: move reference material into docs/"
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.name != "README.md" and f"]({p.name}" not in index]
    assert not missing, f"docs/README.md does not link {', '.join(missing)}"


def test_checks_catch_drift(tmp_path: Path) -> None:
    """The checkers themselves fail on made-up options, commands, scripts, calls and links."""
    bad = tmp_path / "bad.md"
    bad.write_text(
        "```bash\n"
        "websailor eval --bench B --out D --no-such-option 3\n"
        "websailor trian rl\n"
        "python -m websailor.no_such_module --port 1\n"
        "python benchmarks/web_faults.py --no-such-arg\n"
        "```\n"
        "Use `--no-such-flag`, see [x](missing.md) and [y](agent.md#no-such-heading).\n\n"
        "```python\nfrom websailor.agent import AgentConfig\nAgentConfig(no_such_field=1)\n```\n",
        encoding="utf-8",
    )
    page = parse_page(bad)
    page.path = DOCS / "bad.md"  # as if it were a page of docs/
    errors = check_commands(page)[0] + check_python(page, page.blocks[1])[0] + check_links(page)[0]
    expected = [
        "docs/bad.md:2: websailor eval has no option --no-such-option",
        "docs/bad.md:3: websailor has no command 'trian'",
        "docs/bad.md:4: websailor.no_such_module does not exist",
        "docs/bad.md:5: benchmarks/web_faults.py has no option --no-such-arg",
        "docs/bad.md:7: no websailor command has an option --no-such-flag",
        "docs/bad.md:7: link missing.md points at nothing",
        "docs/bad.md:7: link agent.md#no-such-heading: no heading #no-such-heading in docs/agent.md",
    ]
    assert [e for e in errors if not e.startswith("docs/bad.md:11:")] == expected
    assert [e for e in errors if e.startswith("docs/bad.md:11: AgentConfig(no_such_field=1) does not match")]
