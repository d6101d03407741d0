"""The docs stay true: README.md and docs/ are checked against the code they describe.

- The generated pages (`docs/reference/configuration.md`, `docs/reference/cli.md`) equal what
  `scripts/gen_docs.py` makes from the config schema and the argument parser now.
- `mkdocs build --strict` succeeds (broken links and anchors fail it: `mkdocs.yml`'s `validation`).
- README.md has at most 300 lines; its relative links, and the source paths and `smlaunch.` names
  the pages cite in code spans, exist.
- Every fenced code block has a known language, and every YAML and shell block follows one of the
  conventions below.

YAML blocks (fenced `yaml`):

- A block whose first line is `# not a config: <what it is>` is not a config (a KubeRay manifest
  excerpt, say) and is only parsed as YAML.
- Any other block is a config and must validate with the project's loader,
  `smlaunch.config.load_config`. A block with the three sections every config needs (`cluster`,
  `channels`, `trainer`) is a whole config, validated as it stands. Any other block is a snippet:
  each of its top-level sections replaces that section of a base config, `configs/tiny.yaml` unless
  the block's first line is `# base: configs/<name>.yaml`, and the result is validated.

Shell blocks (fenced `bash`, `sh`, `shell` or `console`):

- A block whose first line is `# example: <why>` is an example of a remote, long or
  machine-changing command (`make run`, `sm-launch submit`, `kubectl ...`) and is not run.
- Every command of any other block runs here, from the repository root, and must exit 0: a command
  is a line (continued by a trailing backslash), with `#` comments dropped, and must start with
  `sm-launch` (run as `python -m smlaunch.launcher.cli`, as tests/launcher/test_cli.py does) or
  `.venv/bin/python` (run with this interpreter).

Console output goes in `text` blocks, which are not run. The whole file takes about 20 s.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from smlaunch.config import load_config
from smlaunch.launcher.cli import build_parser, with_default_command

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SHELL = {"bash", "sh", "shell", "console"}
LANGUAGES = SHELL | {"yaml", "text", "python", "dockerfile"}
BASE = "configs/tiny.yaml"
WHOLE = {"cluster", "channels", "trainer"}
"""The sections every config needs: a block with all three is a whole config, not a snippet."""
NOT_A_CONFIG = "# not a config:"
EXAMPLE = "# example:"
README_MAX_LINES = 300
FIX = "run `.venv/bin/python scripts/gen_docs.py` (or `make docs`) and commit the pages it writes"


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def first_line(self) -> str:
        return self.text.lstrip("\n").split("\n", 1)[0].strip()


def code_blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file, indented ones (in list items) included."""
    blocks, current = [], None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if current is None:
            match = re.match(r"^(\s*)(`{3,})(.*)$", line)
            if match:
                language = (match.group(3).split() or [""])[0]  # `yaml title=...`: yaml
                current = (number, len(match.group(1)), match.group(2), language, [])
            continue
        start, indent, fence, language, lines = current
        if re.match(rf"^\s*{fence}`*\s*$", line):
            blocks.append(Block(path, start, language, "\n".join(lines) + "\n"))
            current = None
        else:
            lines.append(line[indent:] if not line[:indent].strip() else line.lstrip())
    assert current is None, f"{path.relative_to(ROOT)}:{current[0]}: a code block is not closed"
    return blocks


BLOCKS = [block for path in DOC_FILES for block in code_blocks(path)]
YAML_BLOCKS = [b for b in BLOCKS if b.language == "yaml"]
SHELL_BLOCKS = [b for b in BLOCKS if b.language in SHELL]
PYTHON_BLOCKS = [b for b in BLOCKS if b.language == "python"]


def ids(blocks: list[Block]) -> list[str]:
    return [b.where for b in blocks]


# --- the generated pages and the site ------------------------------------------------------------


def test_generated_reference_pages_are_current():
    """A schema, docstring or parser change without regenerating fails here, naming the page."""
    out = subprocess.run(
        [sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr.strip() or out.stdout.strip() or f"gen_docs --check failed; {FIX}"


def test_site_builds_with_strict_mkdocs(tmp_path):
    for module in ("mkdocs", "material"):
        if importlib.util.find_spec(module) is None:
            pytest.fail(
                f"{module} is not installed in {sys.prefix}: the docs need the project's dev extra "
                "(`make setup` installs it: pip install -e '.[test,dev]')"
            )
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "WARNING" not in out.stderr, out.stderr[-3000:]
    assert (site / "reference" / "configuration" / "index.html").is_file()


# --- README and the paths the pages cite ----------------------------------------------------------


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move the detail into docs/"


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    assert targets
    broken = [t for t in targets if "://" not in t and not (ROOT / t.split("#")[0]).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def _defined_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names}
    return names


def _name_exists(dotted: str) -> bool:
    """`smlaunch.x.y` is a module, or a name a module defines or imports (read, not imported), or an
    attribute the module gives when imported (`smlaunch.run`, loaded on first use)."""
    if _module_file(dotted) is not None:
        return True
    module, _, attribute = dotted.rpartition(".")
    source = _module_file(module)
    if source is None:
        return False
    if attribute in _defined_names(source):
        return True
    return hasattr(importlib.import_module(module), attribute)


def _module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


SOURCE_FILES = {p.name for folder in ("smlaunch", "tests", "bench", "scripts") for p in (ROOT / folder).rglob("*.py")}


def test_cited_paths_and_names_exist():
    """`smlaunch/...py`, `tests/...`, `bench/...` and `smlaunch.x.y` in code spans name real things, and
    so does every `name.py` of the architecture page."""
    missing = []
    for path in DOC_FILES:
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
        for span in set(re.findall(r"`([^`\n]+)`", text)):
            if re.fullmatch(r"(smlaunch|tests|bench|configs|scripts|docs)/[\w./-]+", span):
                if not (ROOT / span).exists():
                    missing.append(f"{path.relative_to(ROOT)}: {span}")
            elif re.fullmatch(r"smlaunch(\.\w+)+", span):
                if not _name_exists(span):
                    missing.append(f"{path.relative_to(ROOT)}: {span}")
            elif re.fullmatch(r"\w+\.py", span) and path.name == "architecture.md":  # its lists of modules
                if span not in SOURCE_FILES:
                    missing.append(f"{path.relative_to(ROOT)}: {span}")
    assert not missing, "the docs cite paths or names that do not exist:\n" + "\n".join(sorted(missing))


# --- code blocks ----------------------------------------------------------------------------------


def test_code_blocks_have_known_languages():
    unknown = [f"{b.where}: {b.language or '(none)'}" for b in BLOCKS if b.language not in LANGUAGES]
    assert not unknown, f"fence each code block with one of {sorted(LANGUAGES)}: {unknown}"


def test_the_docs_show_configs_and_commands():
    """The conventions below have blocks to check (a changed fence format would skip them all)."""
    assert len(YAML_BLOCKS) >= 10 and len(SHELL_BLOCKS) >= 10


def snippet_config(block: Block) -> dict:
    """A config block as the whole config it stands for (the conventions in this module's docstring)."""
    tree = yaml.safe_load(block.text)
    assert isinstance(tree, dict), f"{block.where}: a config block must be a mapping at the top level"
    if WHOLE <= set(tree):
        return tree
    base = BASE
    match = re.match(r"#\s*base:\s*(\S+)", block.first_line)
    if match:
        base = match.group(1)
    merged = yaml.safe_load((ROOT / base).read_text(encoding="utf-8"))
    merged.update(tree)
    return merged


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=ids(YAML_BLOCKS))
def test_yaml_block_is_a_valid_config_or_marked(block, tmp_path):
    if block.first_line.startswith(NOT_A_CONFIG):
        assert block.first_line[len(NOT_A_CONFIG) :].strip(), f"{block.where}: say what the YAML is"
        yaml.safe_load(block.text)
        return
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(snippet_config(block)), encoding="utf-8")
    load_config(config)  # raises ConfigError naming the field


def commands(block: Block) -> list[list[str]]:
    """The block's commands as argv lists: continued lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n", " ", block.text)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def sm_launch_commands(block: Block) -> list[list[str]]:
    """The `sm-launch ...` commands of a block, cut at shell operators (`cd x && sm-launch y > z`)."""
    found = []
    for argv in commands(block):
        segment: list[str] = []
        for token in [*argv, ";"]:
            if token in {"&&", "||", "|", ";", ">", ">>"}:
                if segment[:1] == ["sm-launch"]:
                    found.append(segment)
                segment = [] if token != ">" and token != ">>" else ["(redirect)"]
            else:
                segment.append(token)
    return found


def argv_for(block: Block, argv: list[str]) -> list[str]:
    if argv[0] == "sm-launch":
        return [sys.executable, "-m", "smlaunch.launcher.cli", *argv[1:]]
    if argv[0] == ".venv/bin/python":
        return [sys.executable, *argv[1:]]
    pytest.fail(
        f"{block.where}: `{shlex.join(argv)}` can run neither as sm-launch nor with .venv/bin/python here; "
        f"mark the block's first line `{EXAMPLE} <why>` if it is remote, long or changes the machine"
    )


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=ids(SHELL_BLOCKS))
def test_shell_block_runs_or_is_marked(block):
    if block.first_line.startswith(EXAMPLE):
        assert block.first_line[len(EXAMPLE) :].strip(), f"{block.where}: say why the example is not run"
        assert commands(block), f"{block.where}: an example block without a command"
        for argv in sm_launch_commands(block):  # not run, but its flags must be sm-launch's
            try:
                build_parser().parse_args(with_default_command(argv[1:]))
            except SystemExit:
                pytest.fail(f"{block.where}: `{shlex.join(argv)}` does not parse as sm-launch's arguments")
        return
    assert commands(block), f"{block.where}: no command in a shell block"
    for argv in commands(block):
        out = subprocess.run(argv_for(block, argv), cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (
            f"{block.where}: `{shlex.join(argv)}` exited {out.returncode}:\n{out.stderr[-2000:]}"
        )


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=ids(PYTHON_BLOCKS))
def test_python_block_compiles(block):
    compile(block.text, block.where, "exec")
