"""Export the chapters' code into the `transformer` package.

Every chapter in book/ whose front matter names a `module` contributes the code cells
tagged `export`, in order, to transformer/<module>.py. The package's __init__.py
re-exports the public names (top-level classes and functions not starting with "_") of
every module, and when a chapter exports `cli`, __main__.py runs its main() for
`python -m transformer`. A class may be written across several cells, as d2l.ai does: a
function decorated `@add_to_class(C)` in a later cell becomes a method of C in the notebook,
and the export moves it into the body of C, so the package holds ordinary classes.

Run it after editing a chapter; `--check` compares instead of writing and fails on any
difference, including a module that is new or gone.

    python tools/export.py            # write transformer/
    python tools/export.py --check    # exit 1 if transformer/ is out of date
"""

from __future__ import annotations

import argparse
import ast
import difflib
import inspect
import re
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DOC = '''"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Each module is generated from one chapter of the book (see the first line of each file).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("transformer")
except PackageNotFoundError:  # imported from a source tree that was never pip-installed
    __version__ = "unknown"


def add_to_class(cls: type):
    """Decorator: attach the function to `cls` as a method (`@add_to_class(Trainer)`).

    How the book writes a long class across several cells with prose between them; the
    package never calls it, because tools/export.py moves such functions into the class body.
    """

    def attach(function):
        name = getattr(function, "__name__", None) or function.fget.__name__  # a property
        setattr(cls, name, function)
        return function

    return attach
'''


def chapter_module(chapter: Path) -> tuple[str, str] | None:
    """Return (module name, module source) for one chapter, or None if it exports nothing."""
    notebook = jupytext.read(chapter)
    module = notebook.metadata.get("module")
    cells = [
        cell.source.strip("\n")
        for cell in notebook.cells
        if cell.cell_type == "code" and "export" in cell.metadata.get("tags", [])
    ]
    if module is None:
        if cells:
            raise ValueError(f"{chapter}: cells are tagged 'export' but the front matter names no 'module'")
        return None
    kept = notebook.metadata.get("jupytext", {}).get("notebook_metadata_filter", "")
    if "module" not in kept.split(","):
        raise ValueError(
            f"{chapter}: add 'notebook_metadata_filter: module' under 'jupytext:' in the front matter, "
            "or jupytext drops 'module' when the chapter is saved from Jupyter"
        )
    if not module.isidentifier():
        raise ValueError(f"{chapter}: 'module' must be a Python identifier, got {module!r}")
    if not cells:
        raise ValueError(f"{chapter}: the front matter names module {module!r} but no cell is tagged 'export'")
    header = f"# Generated from book/{chapter.name} by tools/export.py: edit the chapter, not this file.\n"
    body = merge_methods("\n\n\n".join(cells) + "\n", chapter)
    names = public_names(body)
    all_line = "\n\n__all__ = [" + ", ".join(repr(n) for n in names) + "]\n"
    return module, header + body + all_line


def _code(node: ast.AST) -> str:
    """A node's code, with docstrings dedented: what moving a function must not change."""
    node = ast.parse(ast.unparse(node))
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                value.value = inspect.cleandoc(value.value)
    return ast.dump(node)


def merge_methods(source: str, chapter: Path) -> str:
    """Move each top-level function decorated `@add_to_class(C)` to the end of class C's body."""
    tree = ast.parse(source)
    lines = source.splitlines()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    moved: dict[str, list[str]] = {}
    originals: list[tuple[str, ast.FunctionDef]] = []
    dropped: set[int] = set()
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or not node.decorator_list:
            continue
        mark = node.decorator_list[0]
        if not (isinstance(mark, ast.Call) and getattr(mark.func, "id", None) == "add_to_class"):
            continue
        target = getattr(mark.args[0], "id", None) if len(mark.args) == 1 else None
        where = f"{chapter}: @add_to_class on {node.name}"
        if target not in classes or classes[target].lineno > node.lineno or mark.end_lineno != mark.lineno:
            raise ValueError(f"{where} must name, on one line, a class exported by an earlier cell")
        if any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "super" and not n.args
               for n in ast.walk(node)):
            raise ValueError(f"{where}: super() needs its arguments outside a class body, super({target}, self)")
        body = lines[mark.lineno : node.end_lineno]
        moved.setdefault(target, []).append("\n".join("    " + l if l.strip() else "" for l in body))
        dropped.update(range(mark.lineno - 1, node.end_lineno))
        node.decorator_list = node.decorator_list[1:]
        originals.append((target, node))
    out: list[str] = []
    ends = {c.end_lineno - 1: name for name, c in classes.items() if name in moved}
    for i, line in enumerate(lines):
        if i not in dropped:
            out.append(line)
        if i in ends:
            for method in moved[ends[i]]:
                out += ["", method]
    merged = re.sub(r"\n{4,}", "\n\n\n", "\n".join(out)).rstrip("\n") + "\n"
    methods = {
        (c.name, f.name): f for c in ast.parse(merged).body if isinstance(c, ast.ClassDef) for f in c.body
        if isinstance(f, ast.FunctionDef)
    }
    for target, node in originals:
        if _code(methods[target, node.name]) != _code(node):
            raise ValueError(f"{chapter}: {target}.{node.name} changes when indented into the class "
                             "(a multi-line string?); keep it in the class's own cell")
    return merged


def public_names(source: str) -> list[str]:
    """Top-level classes and functions whose names do not start with an underscore."""
    tree = ast.parse(source)
    return [
        node.name
        for node in tree.body
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and not node.name.startswith("_")
    ]


def package_files(book: Path) -> dict[str, str]:
    """Map each file name of the package to its generated source."""
    files: dict[str, str] = {}
    chapters: dict[str, Path] = {}
    for chapter in sorted(book.glob("*.md")):
        exported = chapter_module(chapter)
        if exported is None:
            continue
        module, source = exported
        if module in chapters:
            raise ValueError(f"{chapter} and {chapters[module]} both export module {module!r}")
        chapters[module] = chapter
        files[f"{module}.py"] = source
    lines = [PACKAGE_DOC]
    for module in sorted(files):
        names = public_names(files[module])
        lines.append(f"from .{module[:-3]} import " + ", ".join(names))
    every = [n for module in sorted(files) for n in public_names(files[module])]
    lines.append("\n__all__ = ['__version__', 'add_to_class', " + ", ".join(repr(n) for n in every) + "]")
    files["__init__.py"] = "\n".join(lines) + "\n"
    if "cli.py" in files:
        files["__main__.py"] = (
            "# Generated by tools/export.py: `python -m transformer` runs transformer.cli.main (book/cli.md).\n"
            "from transformer.cli import main\n\nraise SystemExit(main())\n"
        )
    return files


def differences(expected: dict[str, str], package: Path) -> list[str]:
    """Human-readable differences between the generated files and the package on disk."""
    present = {p.name: p.read_text() for p in package.glob("*.py")} if package.is_dir() else {}
    problems = [f"{package / name}: missing (the chapters export it)" for name in sorted(set(expected) - set(present))]
    problems += [f"{package / name}: no chapter exports it" for name in sorted(set(present) - set(expected))]
    for name in sorted(set(expected) & set(present)):
        if expected[name] != present[name]:
            diff = difflib.unified_diff(
                present[name].splitlines(), expected[name].splitlines(), f"{package / name}", "exported", lineterm="", n=1
            )
            problems.append("\n".join(diff))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--book", type=Path, default=ROOT / "book", help="folder of the chapters (default: book/)")
    parser.add_argument("--package", type=Path, default=ROOT / "transformer", help="package folder (default: transformer/)")
    parser.add_argument("--check", action="store_true", help="compare with the package instead of writing it")
    args = parser.parse_args(argv)
    if not args.book.is_dir():
        parser.error(f"--book must be a folder of chapters; {args.book} is not a folder")
    expected = package_files(args.book)
    if args.check:
        problems = differences(expected, args.package)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(f"{len(problems)} difference(s): run `make export` and commit the package", file=sys.stderr)
        return 1 if problems else 0
    args.package.mkdir(parents=True, exist_ok=True)
    for stale in set(p.name for p in args.package.glob("*.py")) - set(expected):
        (args.package / stale).unlink()
    for name, source in expected.items():
        target = args.package / name
        if not target.exists() or target.read_text() != source:
            tmp = target.with_suffix(".py.tmp")
            tmp.write_text(source)
            tmp.replace(target)
    print(f"exported {len(expected)} file(s) into {args.package}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
