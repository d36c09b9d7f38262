"""The committed package is exactly what the chapters export (tools/export.py)."""

import ast
import contextlib
import functools
import graphlib
import io
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def export(*args: str) -> subprocess.CompletedProcess:
    """tools/export.py's main with these arguments, in this process (a process of its own
    proves nothing more, and the chapters are then parsed once for all the calls)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _tool().main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_committed_package_matches_the_chapters():
    result = export("--check")
    assert result.returncode == 0, result.stderr


def test_every_generated_file_names_its_chapter_and_the_chapter_names_it():
    for module in (ROOT / "transformer").glob("*.py"):
        if module.name == "_book.py":  # the book's helpers: cells tagged book-helper
            first_line = module.read_text().splitlines()[0]
            chapters = re.fullmatch(r"# Generated from (.*) by tools/export.py:.*", first_line)[1]
            for chapter in chapters.split(", "):
                assert ":tags: [book-helper" in (ROOT / chapter).read_text(), chapter
        elif not module.name.startswith("__") and module.name != "utils.py":
            first_line = module.read_text().splitlines()[0]
            match = re.fullmatch(r"# Generated from book/(\w+\.md) by tools/export.py: .*", first_line)
            assert match, (module, first_line)
            chapter = (ROOT / "book" / match[1]).read_text()
            assert f"\nmodule: {module.stem}\n" in chapter or f"export:{module.stem}" in chapter, (
                module, match[1])


def test_the_package_exposes_a_few_dozen_names_each_from_its_module():
    import transformer

    assert "__version__" in transformer.__all__ and len(transformer.__all__) <= 40
    for name in transformer.__all__:
        value = getattr(transformer, name)
        if name != "__version__":  # a function or class, defined in one of the modules
            assert value.__module__.startswith("transformer."), (name, value.__module__)
    assert "folder_lock" not in transformer.__all__, "engineering helpers stay in their module"


def _package_imports(package: Path) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports, wherever the
    import is (under TYPE_CHECKING and inside functions too)."""
    graph = {}
    for path in package.glob("*.py"):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        names = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:  # from . import a, from .a import f
                names.update(f"{package.name}.{node.module or alias.name}" for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module or "")
            elif isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
        graph[path.stem] = {name.split(".")[1] for name in names if name.startswith(f"{package.name}.")}
    return graph


def test_no_module_imports_one_that_imports_it_back(tmp_path):
    """graphlib (the standard library) finds the circles; on a package made with one, it
    names it. File writing sits below everything: files.py imports nothing of the package."""
    graph = _package_imports(ROOT / "transformer")
    order = list(graphlib.TopologicalSorter(graph).static_order())
    assert graph["files"] == set() and order.index("files") < order.index("checkpoints")
    circle = tmp_path / "pkg"
    circle.mkdir()
    (circle / "a.py").write_text("from pkg.b import f\n")
    (circle / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import g\n")
    (circle / "c.py").write_text("def h():\n    from . import a\n")
    assert _package_imports(circle) == {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(_package_imports(circle)).static_order())


def test_no_module_imports_the_package_init():
    """A module importing `transformer` itself would depend on the order __init__ runs in;
    helpers such as add_to_class and the version live in transformer.utils."""
    for module in (ROOT / "transformer").glob("*.py"):
        if module.name in ("__init__.py", "__main__.py"):
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                assert all(a.name != "transformer" for a in node.names), module
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                assert node.module != "transformer", (module, node.lineno)
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                assert node.module, (module, node.lineno)


def code_lines(chapter: Path):
    """(line number, line) of every line inside the chapter's code cells, without the
    cell's options: `:tags:` lines, or the YAML block between `---` lines that jupytext
    writes for nested options (an image's alt text), which the page does not show."""
    inside = options = False
    for number, line in enumerate(chapter.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```{code-cell}"):
            inside, first = True, True
        elif inside and line.startswith("```"):
            inside = False
        elif inside:
            if first and line == "---" or options:
                options = not (options and line == "---")
            elif not re.match(r":\w+:", line):
                yield number, line
            first = False


@pytest.mark.parametrize("chapter", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_no_code_line_is_wider_than_the_rendered_column(chapter):
    """The book's column shows 88 characters (black's and ruff's width) without scrolling;
    the package's modules are these cells, so they keep the width too. A cell's options
    (`:tags:` lines, or the YAML block of an image's alt text) are not shown."""
    wide = [f"{chapter.name}:{n} ({len(line)})" for n, line in code_lines(chapter)
            if len(line) > 88]
    assert not wide, f"code lines over 88 characters: {', '.join(wide)}"


@pytest.mark.parametrize("chapter", sorted((ROOT / "book").glob("*.md")), ids=lambda p: p.name)
def test_no_code_cell_is_longer_than_60_lines(chapter):
    """A cell a reader takes in at a glance: at most 60 lines, its options not counted."""
    cells: dict[int, list[str]] = {}
    start = None
    for number, line in code_lines(chapter):
        if start is None or number != previous + 1:
            start = number
        cells.setdefault(start, []).append(line)
        previous = number
    long = []
    for start, lines in cells.items():
        while lines and not lines[0].strip():
            lines = lines[1:]  # the blank line after the cell's options
        if len(lines) > 60:
            long.append(f"{chapter.name}:{start} ({len(lines)})")
    assert not long, f"code cells over 60 lines: {', '.join(long)}"


@pytest.mark.parametrize("module", sorted((ROOT / "transformer").glob("*.py")), ids=lambda p: p.name)
def test_no_line_of_the_package_is_wider_than_88_characters(module):
    """Methods written with @add_to_class move into their class one level deeper."""
    lines = module.read_text(encoding="utf-8").splitlines()
    wide = [f"{module.name}:{n} ({len(line)})" for n, line in enumerate(lines, 1) if len(line) > 88]
    assert not wide, f"lines over 88 characters: {', '.join(wide)}"


@pytest.fixture
def package_copy(tmp_path):
    shutil.copytree(ROOT / "transformer", tmp_path / "transformer", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path / "transformer"


@pytest.mark.parametrize("tamper", ["delete", "edit", "extra"])
def test_check_fails_on_any_difference_and_export_repairs_it(package_copy, tamper):
    if tamper == "delete":
        (package_copy / "attention.py").unlink()
        expected = "attention.py: missing"
    elif tamper == "edit":
        path = package_copy / "model.py"
        path.write_text(path.read_text().replace("d_model: int = 512", "d_model: int = 256"))
        expected = "d_model: int = 512"
    else:
        (package_copy / "stale.py").write_text("x = 1\n")
        expected = "stale.py: no chapter exports it"
    result = export("--check", "--package", str(package_copy))
    assert result.returncode == 1 and expected in result.stderr
    assert export("--package", str(package_copy)).returncode == 0
    assert export("--check", "--package", str(package_copy)).returncode == 0


def test_the_paper_index_names_only_what_the_package_has():
    import importlib

    modules = [importlib.import_module(f"transformer.{p.stem}")
               for p in sorted((ROOT / "transformer").glob("*.py")) if p.stem[0] != "_"]
    rows = [line for line in (ROOT / "book" / "paper_index.md").read_text().splitlines()
            if line.startswith("| §") or line.startswith("| Figures")]
    names = {name for row in rows
             for name in re.findall(r"`([A-Za-z_][\w.]*)`", row.split("|")[4])}
    assert len(rows) >= 15 and len(names) >= 30
    for name in sorted(names):
        first, *rest = name.split(".")
        owners = [m for m in modules if first in getattr(m, "__all__", ())]
        assert owners, f"book/paper_index.md names {name}, which no module of the package has"
        obj = getattr(owners[0], first)
        for part in rest:
            assert hasattr(obj, part), f"book/paper_index.md names {name}: no {part}"
            obj = getattr(obj, part)


def test_notebooks_for_nbval_and_colab_keep_the_chapter_and_install_only_on_colab(tmp_path):
    import nbformat

    result = subprocess.run([sys.executable, str(ROOT / "tools" / "notebooks.py"), str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    chapters = {p.stem for p in (ROOT / "book").glob("*.md") if "\nkernelspec:" in p.read_text()}
    assert {p.stem for p in tmp_path.glob("*.ipynb")} == chapters
    notebook = nbformat.read(tmp_path / "attention.ipynb", as_version=4)
    first = notebook.cells[0]
    assert first.metadata["tags"] == ["colab"] and '"google.colab" in sys.modules' in first.source
    assert "git\", \"clone\"" in first.source and "https://github.com/" in first.source
    assert notebook.metadata["module"] == "attention"
    exec(compile(first.source, "colab-cell", "exec"), {})  # outside Colab it does nothing


@functools.cache
def _tool():
    import importlib.util

    spec = importlib.util.spec_from_file_location("export", ROOT / "tools" / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _merge(source: str) -> str:
    return _tool().merge_methods(source, Path("chapter.md"))


CHAPTER = """---
jupytext:
  notebook_metadata_filter: module
  text_representation:
    extension: .md
    format_name: myst
    format_version: 0.13
module: main
---

```{{code-cell}} ipython3
:tags: [{first}]

def one():
    return 1
```

```{{code-cell}} ipython3
:tags: [{second}]

def two():
    return 2
```

```{{code-cell}} ipython3
three = 3
```
"""


@pytest.mark.parametrize("first, second, modules", [
    ("export", "export", {"main": ["one", "two"]}),
    ("export", "export:files", {"main": ["one"], "files": ["two"]}),
    ("export:files", "export", {"files": ["one"], "main": ["two"]}),
])
def test_a_cell_goes_to_the_chapters_module_or_the_one_its_tag_names(tmp_path, first, second, modules):
    chapter = tmp_path / "chapter.md"
    chapter.write_text(CHAPTER.format(first=first, second=second))
    sources = _tool().chapter_modules(chapter)
    assert {name: _tool().public_names(source) for name, source in sources.items()} == modules
    assert all(source.startswith("# Generated from book/chapter.md by tools/export.py")
               for source in sources.values())


@pytest.mark.parametrize("first, second, message", [
    ("export:files", "export:other", "names module 'main' but no cell is tagged 'export'"),
    ("export, export:files", "export", "a cell is tagged for 2 modules"),
    ("export:no-name", "export", "a module must be a Python identifier, got 'no-name'"),
])
def test_a_chapters_export_tags_that_name_no_module_are_refused(tmp_path, first, second, message):
    chapter = tmp_path / "chapter.md"
    chapter.write_text(CHAPTER.format(first=first, second=second))
    with pytest.raises(ValueError, match=re.escape(message)):
        _tool().chapter_modules(chapter)


def test_methods_added_in_later_cells_are_moved_into_their_class():
    cells = '''class Counter:
    """Counts."""

    def __init__(self):
        self.n = 0


x = 1


@add_to_class(Counter)
def add(self, k: int = 1) -> None:
    """Add k.

    Returns nothing."""
    self.n += k  # in place


@add_to_class(Counter)
@classmethod
def start(cls) -> "Counter":
    return cls()
'''
    expected = '''class Counter:
    """Counts."""

    def __init__(self):
        self.n = 0

    def add(self, k: int = 1) -> None:
        """Add k.

        Returns nothing."""
        self.n += k  # in place

    @classmethod
    def start(cls) -> "Counter":
        return cls()


x = 1
'''
    assert _merge(cells) == expected
    namespace: dict = {}
    exec(expected, namespace)
    counter = namespace["Counter"].start()
    counter.add(3)
    assert counter.n == 3
    assert _merge("def f():\n    return 1\n") == "def f():\n    return 1\n"


@pytest.mark.parametrize(
    "later, message",
    [
        ("@add_to_class(Missing)\ndef f(self):\n    pass\n", "a class exported by an earlier cell"),
        ("@add_to_class(A)\ndef __init__(self):\n    super().__init__()\n", "super(A, self)"),
        ('@add_to_class(A)\ndef f(self):\n    return """a\nb"""\n', "multi-line string"),
    ],
)
def test_a_method_that_cannot_move_unchanged_is_refused(later, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _merge("class A:\n    pass\n\n\n" + later)


def test_bibliography_labels_read_like_the_author_year_citations():
    import importlib.util

    from pybtex.database import parse_file

    spec = importlib.util.spec_from_file_location("bibtex_author_year", ROOT / "tools" / "bibtex_author_year.py")
    extension = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extension)
    entries = parse_file(ROOT / "book" / "references.bib").entries
    keys = ["vaswani2017attention", "press2017using", "kaplan2020scaling"]
    labels = list(extension.AuthorYearLabels().format_labels([entries[k] for k in keys]))
    assert labels == ["Vaswani et al., 2017", "Press and Wolf, 2017", "Kaplan et al., 2020"]


def test_the_units_make_test_starts_first_exist():
    """conftest.py's HEAVIEST_FIRST names test files and chapters' notebooks that are there (a
    renamed one would silently lose its place)."""
    from conftest import HEAVIEST_FIRST

    for unit in HEAVIEST_FIRST:
        path = Path(unit)
        exists = (ROOT / "book" / f"{path.stem}.md") if path.suffix == ".ipynb" else ROOT / path
        assert exists.is_file(), unit


def test_binder_installs_the_cpu_torch_the_pins_and_the_package():
    """Binder (repo2docker) reads binder/ on the notebooks branch: the pinned requirements
    with the CPU build of torch, then postBuild installs the package, so that a chapter's
    `import transformer` works there; Python as pyproject.toml asks."""
    binder = ROOT / "binder"
    lines = [line.split("#")[0].strip() for line in (binder / "requirements.txt").read_text().splitlines()]
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert "-r ../requirements.txt" in lines and (binder / "../requirements.txt").resolve().is_file()
    post = binder / "postBuild"
    assert post.stat().st_mode & 0o111, "repo2docker runs postBuild only when it is executable"
    assert "python -m pip install --no-deps -e ." in post.read_text()
    runtime = (binder / "runtime.txt").read_text().strip()
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert runtime == f"python-{requires.removeprefix('>=')}"


def test_no_class_of_the_package_is_over_150_lines():
    """Issue 110: a class holds one concern (the Trainer its loop and step, TransformerConfig
    its schema); what builds or catalogues sits beside it as functions or data."""
    import ast

    long = [f"{path.name}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in sorted((ROOT / "transformer").glob("*.py"))
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno >= 150]
    assert not long, f"classes over 150 lines: {long}"
