"""The code blocks of README.md and docs/*.md, checked so the documentation stays true.

- ```python blocks run, each page's blocks in order in one namespace (a page's blocks may build
  on each other), with the repository root as the working directory. A block's own asserts are
  its checks. The fence's info string names what a block needs beyond kiln, NumPy and
  ml_dtypes: ``python torch`` (PyTorch), ``python cuda`` (a CUDA device that kiln and PyTorch
  both reach; conftest.py's rule: skipped without one, a failure under
  KILN_REQUIRE_BACKEND=cuda), ``python mlx`` (MLX). A block whose need is absent is skipped
  with the reason.
- ```sh / ```bash / ```console blocks: every ``kiln SUBCOMMAND`` is a subcommand of the command
  line (crates/kiln-cli), every ``--flag`` given to it is one of its flags, and every repository
  path (scripts/..., bench/..., docs/..., crates/..., python/..., .ci/...) exists.
- ```toml blocks parse, and a kernel spec file's tables and keys are those the spec reader
  accepts (the ``only_keys`` lists of crates/kiln-tools/src/spec).
- Repository paths in inline code and relative links, anchors included, exist everywhere.
- No block is left without a language: rustdoc would compile it as Rust (the ```rust blocks
  are doc tests: ``cargo test -p kiln --doc``, through crates/kiln/src/lib.rs).
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kiln

from conftest import cuda_required

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI = ROOT / "crates" / "kiln-cli" / "src"
SPEC = ROOT / "crates" / "kiln-tools" / "src" / "spec"

# Languages a fence may name, and what is done with each.
PYTHON, SHELL, TOML = {"python"}, {"sh", "bash", "console"}, {"toml"}
OTHER = {"rust", "text", "yaml", "json", "metal", "cpp", "c++", "cuda"}
NEEDS = {"torch", "cuda", "mlx"}


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    tags: list[str]
    code: str

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


@dataclass
class Page:
    path: Path
    text: str
    blocks: list[Block] = field(default_factory=list)
    prose: str = ""  # the text outside code blocks


FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def parse(path: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    page = Page(path, text)
    prose, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        indent, fence, info = m.group("indent"), m.group("fence"), m.group("info").strip()
        start, body = i, []
        i += 1
        while i < len(lines) and not (lines[i].strip().startswith(fence) and not lines[i].strip()[len(fence):].strip()):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        i += 1  # the closing fence
        words = info.replace(",", " ").split()
        lang = words[0] if words else ""
        page.blocks.append(Block(path, start + 1, lang, words[1:], "\n".join(body) + "\n"))
    page.prose = "\n".join(prose)
    return page


PARSED = [parse(p) for p in PAGES]
BLOCKS = [b for p in PARSED for b in p.blocks]


def test_every_block_names_its_language():
    """An unnamed fence is a Rust doc test to rustdoc, and unchecked here."""
    unnamed = [b.id for b in BLOCKS if not b.lang]
    assert not unnamed, f"code blocks without a language (use text for output): {unnamed}"
    unknown = [f"{b.id} ({b.lang})" for b in BLOCKS if b.lang not in PYTHON | SHELL | TOML | OTHER]
    assert not unknown, f"code blocks in a language nothing checks or names: {unknown}"
    bad_tags = [f"{b.id} ({' '.join(b.tags)})" for b in BLOCKS if b.lang in PYTHON and set(b.tags) - NEEDS]
    assert not bad_tags, f"python blocks with needs other than {sorted(NEEDS)}: {bad_tags}"


def test_pages_with_rust_blocks_are_doc_tests():
    """Each page holding ```rust blocks is included as a doc test by crates/kiln/src/lib.rs."""
    lib = (ROOT / "crates" / "kiln" / "src" / "lib.rs").read_text(encoding="utf-8")
    included = {(ROOT / "crates" / "kiln" / "src" / p).resolve() for p in re.findall(r'include_str!\("([^"]+\.md)"\)', lib)}
    missing = sorted({str(b.page.relative_to(ROOT)) for b in BLOCKS if b.lang == "rust"} - {
        str(p.relative_to(ROOT)) for p in included if p.exists()})
    assert not missing, f"pages with rust blocks that no #[doc = include_str!(...)] in lib.rs runs: {missing}"
    for b in BLOCKS:
        if b.lang == "rust":
            assert "ignore" not in b.tags, f"{b.id}: a rust block must run (no_run only where it needs a GPU)"


# --- Python blocks -------------------------------------------------------------------------------


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def missing_need(block: Block) -> str | None:
    """Why ``block`` cannot run here, or None."""
    tags = set(block.tags)
    if tags & {"torch", "cuda"} and not _importable("torch"):
        return "PyTorch is not installed"
    if "mlx" in tags and not _importable("mlx.core"):
        return "MLX is not installed"
    if "cuda" in tags:
        import torch

        if not (kiln.cuda_available() and torch.cuda.is_available()):
            return f"no CUDA device ({kiln.cuda_status()})"
    return None


def _python_params():
    params = []
    for b in BLOCKS:
        if b.lang in PYTHON:
            marks = [pytest.mark.cuda] if "cuda" in b.tags else []
            params.append(pytest.param(b, id=b.id, marks=marks))
    return params


class PageRun:
    """One page's namespace (a module of its own in sys.modules, which tools that look up a
    function's module, such as torch.compile, import) and which of its blocks have run."""

    def __init__(self, page: Path):
        name = "kiln_docs_" + re.sub(r"\W", "_", str(page.relative_to(ROOT).with_suffix("")))
        self.module = types.ModuleType(name)
        sys.modules[name] = self.module
        self.namespace: dict = self.module.__dict__
        self.done: set[int] = set()
        self.failed: str | None = None


@pytest.fixture(scope="module")
def page_runs():
    runs: dict[Path, PageRun] = {}
    yield runs
    for run in runs.values():
        sys.modules.pop(run.module.__name__, None)
    # A page may install the MLX drop-in; the other test modules expect MLX as it was.
    if "kiln.mlx" in sys.modules:
        sys.modules["kiln.mlx"].uninstall()


def _exec(block: Block, run: PageRun):
    # Padded so that a traceback's line numbers are the page's own.
    code = compile("\n" * block.line + block.code, str(block.page), "exec")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        exec(code, run.namespace)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("block", _python_params())
def test_python_block_runs(block, page_runs):
    reason = missing_need(block)
    if reason is not None:
        if "cuda" in block.tags and cuda_required():
            pytest.fail(f"KILN_REQUIRE_BACKEND=cuda but CUDA was not reached: {reason}")
        pytest.skip(f"{block.id} needs {' '.join(block.tags)}: {reason}")
    if block.page not in page_runs:
        page_runs[block.page] = PageRun(block.page)
    run = page_runs[block.page]
    # The page's earlier blocks first (they run once; a block selected alone still sees them).
    for earlier in BLOCKS:
        if earlier.page != block.page or earlier.lang not in PYTHON or earlier.line >= block.line:
            continue
        if earlier.line in run.done or missing_need(earlier) is not None:
            continue
        if run.failed is not None:
            break
        try:
            _exec(earlier, run)
        except BaseException as e:
            run.failed = f"{earlier.id}: {type(e).__name__}: {e}"
            raise
        finally:
            run.done.add(earlier.line)
    if run.failed is not None:
        pytest.fail(f"an earlier block of this page failed ({run.failed})")
    run.done.add(block.line)
    try:
        _exec(block, run)
    except BaseException as e:
        run.failed = f"{block.id}: {type(e).__name__}: {e}"
        raise


# --- Shell blocks: the command line's subcommands and flags, and paths -----------------------------


def _snake_to_kebab(name: str) -> str:
    return name.replace("_", "-")


def cli_subcommands() -> dict[str, set[str]]:
    """``{subcommand: its own subcommands}`` from the clap enums of crates/kiln-cli."""
    main = (CLI / "main.rs").read_text(encoding="utf-8")
    body = re.search(r"enum Command \{(.*?)\n\}", main, re.S)
    assert body, "enum Command not found in crates/kiln-cli/src/main.rs"
    names = re.findall(r"^    ([A-Z]\w*)\b", body.group(1), re.M)
    subs = {}
    for n in names:
        kebab = re.sub(r"(?<!^)([A-Z])", r"-\1", n).lower()
        subs[kebab] = set()
    cache = (CLI / "cache.rs").read_text(encoding="utf-8")
    inner = re.search(r"enum CacheCommand \{(.*?)\n\}", cache, re.S)
    assert inner and "cache" in subs, "enum CacheCommand not found in crates/kiln-cli/src/cache.rs"
    subs["cache"] = {n.lower() for n in re.findall(r"^    ([A-Z]\w*)\b", inner.group(1), re.M)}
    return subs


def cli_flags() -> set[str]:
    """Every long flag of the command line: clap fields marked ``#[arg(long ...)]``."""
    flags = {"--help", "--version"}
    for path in CLI.glob("*.rs"):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"#\[arg\(([^\]]*)\)\]\s*(?:///[^\n]*\n\s*|#\[[^\n]*\]\s*)*(?:pub\s+)?(\w+)\s*:", text):
            attrs, name = m.group(1), m.group(2)
            if not re.search(r"\blong\b", attrs):
                continue
            explicit = re.search(r'\blong\s*=\s*"([^"]+)"', attrs)
            flags.add("--" + (explicit.group(1) if explicit else _snake_to_kebab(name)))
    return flags


PATH = re.compile(r"(?<![\w./-])((?:scripts|bench|docs|crates|python|\.ci)/[\w./*<>-]*)")


def repo_path_exists(path: str) -> bool:
    path = path.rstrip(".,:;)")
    if "<" in path or ">" in path:  # a pattern such as crates/kiln/src/ops/<op>.rs
        return True
    if "*" in path:
        return bool(glob.glob(str(ROOT / path)))
    return (ROOT / path).exists()


def shell_commands(block: Block) -> list[str]:
    lines = block.code.splitlines()
    if block.lang == "console":
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    out = []
    for line in lines:
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            out.extend(part.strip() for part in re.split(r"&&|\|\||;|\|", line) if part.strip())
    return out


def kiln_invocations(command: str):
    """``(subcommand, rest)`` of each run of the ``kiln`` binary in ``command``: ``kiln ...``,
    ``target/*/kiln ...`` or ``cargo run ... -p kiln-cli -- ...``."""
    words = command.split()
    for i, w in enumerate(words):
        is_binary = w == "kiln" or w.endswith("/kiln")
        if is_binary and (i == 0 or words[i - 1] not in ("-p", "--package", "--bin", "import")):
            if i + 1 < len(words) and re.fullmatch(r"[a-z][\w-]*", words[i + 1]):
                yield words[i + 1], words[i + 2:]
    if words[:2] == ["cargo", "run"] and "kiln-cli" in words and "--" in words:
        rest = words[words.index("--") + 1:]
        if rest:
            yield rest[0], rest[1:]


SHELL_BLOCKS = [b for b in BLOCKS if b.lang in SHELL]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in SHELL_BLOCKS])
def test_shell_block_names_real_commands_and_paths(block):
    subs, flags = cli_subcommands(), cli_flags()
    problems = []
    for command in shell_commands(block):
        for sub, rest in kiln_invocations(command):
            if sub not in subs:
                problems.append(f"`kiln {sub}` is not a subcommand (subcommands: {', '.join(sorted(subs))})")
                continue
            if subs[sub] and rest and not rest[0].startswith("-") and rest[0] not in subs[sub]:
                problems.append(f"`kiln {sub} {rest[0]}`: not one of {sorted(subs[sub])}")
            for word in rest:
                flag = word.split("=")[0]
                if flag.startswith("--") and flag not in flags:
                    problems.append(f"`kiln {sub}`: no flag {flag}")
        for path in PATH.findall(command):
            if not repo_path_exists(path):
                problems.append(f"no such path in the repository: {path}")
    assert not problems, f"{block.id}:\n" + "\n".join(problems)


def test_shell_blocks_are_checked():
    """The checks above see the commands they should (the parser did not silently find none)."""
    found = {sub for b in SHELL_BLOCKS for c in shell_commands(b) for sub, _ in kiln_invocations(c)}
    assert {"demo", "run", "check"} <= found, f"kiln subcommands found in shell blocks: {sorted(found)}"


# --- TOML blocks: they parse, and spec files use the spec reader's keys ----------------------------


def spec_keys() -> dict[str, set[str]]:
    """The keys each spec table takes, from the spec reader's ``only_keys`` lists."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(SPEC.glob("*.rs")))
    view = re.search(r"VIEW_KEYS: \[&str; \d+\] = \[(.*?)\]", text, re.S)
    assert view, "VIEW_KEYS not found in crates/kiln-tools/src/spec"
    view_keys = set(re.findall(r'"(\w+)"', view.group(1)))
    tables = {"root": "", "k": "kernel", "c": "call", "l": "library", "d": "dispatch", "b": "buffer", "sec": "input"}
    keys: dict[str, set[str]] = {}
    for var, listed in re.findall(r"\b(\w+)\.only_keys\(&(\[.*?\]|(?:inputs::)?VIEW_KEYS)\)", text, re.S):
        names = view_keys if "VIEW_KEYS" in listed else set(re.findall(r'"(\w+)"', listed))
        keys.setdefault(tables.get(var, var), set()).update(names)
    for table in ("", "kernel", "call", "input", "library", "dispatch", "buffer"):
        assert keys.get(table), f"the keys of [{table}] were not found in crates/kiln-tools/src/spec"
    return keys


TOML_BLOCKS = [b for b in BLOCKS if b.lang in TOML]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id) for b in TOML_BLOCKS])
def test_toml_block_parses(block):
    tomllib = pytest.importorskip("tomllib")
    doc = tomllib.loads(block.code)
    if not ({"kernel", "library"} & doc.keys()):
        return
    keys = spec_keys()
    problems = [f"top-level [{k}]" for k in doc if k not in keys[""]]
    for table, value in doc.items():
        for entry in value if isinstance(value, list) else [value]:
            problems += [f"[{table}] {k}" for k in entry if k not in keys.get(table, set())]
    assert not problems, f"{block.id}: keys the spec reader refuses: {problems}"


# --- Prose: repository paths in inline code, and relative links ------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", page.prose, re.M):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.path.relative_to(ROOT))) for p in PARSED])
def test_paths_and_links_exist(page):
    problems = []
    for span in re.findall(r"`([^`\n]+)`", page.prose):
        for path in PATH.findall(span):
            if not repo_path_exists(path):
                problems.append(f"no such path: {path}")
    by_path = {p.path.resolve(): p for p in PARSED}
    for target in re.findall(r"\]\(([^)\s]+)\)", page.prose):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.path.parent / file).resolve() if file else page.path.resolve()
        if not dest.exists():
            problems.append(f"broken link: {target}")
        elif anchor and dest in by_path and anchor not in anchors(by_path[dest]):
            problems.append(f"no heading for the anchor: {target}")
    assert not problems, f"{page.path.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_the_docs_index_lists_every_page():
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"\]\(([\w.-]+\.(?:md|yml))\)", index))
    pages = {p.name for p in (ROOT / "docs").iterdir() if p.suffix in (".md", ".yml") and p.name != "README.md"}
    assert pages <= listed, f"docs pages the index does not list: {sorted(pages - listed)}"
