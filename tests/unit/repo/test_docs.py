"""README.md, CONTRIBUTING.md and docs/*.md stay true to the code and to each other.

Each ``headway`` command and flag they write exists and is not a hidden (deprecated) alias;
each relative link leads to a file and, with a ``#fragment``, to one of its headings; the
docs index lists every document; the README stays a front door (at most 250 lines, a table
of contents). Every check is shown to fail on a planted bad example.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import typer

from headway.cli import app
from tests.unit.repo.test_alert_rules import ROOT
from tests.unit.repo.test_runbook import anchor, command_problems

README = ROOT / "README.md"
INDEX = ROOT / "docs" / "index.md"
README_MAX_LINES = 250
FENCE = re.compile(r"^ *```(\w*)\n(.*?)^ *```", re.M | re.S)
INLINE_COMMAND = re.compile(r"`((?:\S*/)?headway [^`]+)`")
SUBSTITUTION = re.compile(r"\$\(((?:\S*/)?headway [^)]*)\)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def documents() -> list[Path]:
    docs = sorted((ROOT / "docs").glob("*.md"))
    return [README, ROOT / "CONTRIBUTING.md", *docs]


def root_command() -> Any:
    return typer.main.get_command(app)


def command_lines(text: str) -> list[str]:
    """Each command line of the text's ``sh`` (and unnamed) blocks, continuation lines
    joined, and each inline ``headway …`` code span; ``$(headway …)`` inside a line
    counts as a line of its own."""
    lines: list[str] = []
    for language, block in FENCE.findall(text):
        if language not in ("sh", "bash", ""):
            continue
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [line.strip() for line in joined.splitlines()]
    lines += INLINE_COMMAND.findall(re.sub(r"\\\n\s*", " ", FENCE.sub("", text)))
    found = []
    for line in lines:
        line = line.split(" #", 1)[0].strip()  # a comment after the command
        if not line:
            continue
        found.append(line)
        found += SUBSTITUTION.findall(line)
    return found


def hidden_problems(line: str, root: Any) -> list[str]:
    """A ``headway …`` line that names a hidden command or option: an old name kept as
    a deprecated alias, which the docs must not teach."""
    match = re.match(r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:\S*/)?headway\s+(.*)", line)
    if match is None:
        return []
    command = root
    problems = []
    for word in re.sub(r"[\[\]]", " ", match[1]).split():
        if word in ("|", "&&", ";", "||") or word.startswith((">", "2>")):
            break
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            for param in getattr(command, "params", ()):
                if name in param.opts and getattr(param, "hidden", False):
                    problems.append(f"{line}: {name} is a hidden (deprecated) option")
            continue
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            break
        if getattr(sub, "hidden", False):
            problems.append(f"{line}: `{word}` is a hidden (deprecated) command")
        command = sub
    return problems


def cleaned_line(line: str) -> str:
    """The line as a command: optional parts' brackets dropped, cut before an elision
    (``headway tenants …``, ``headway loadgen ... --record``), a placeholder in capitals
    (``headway NOUN VERB``) or a colon that ends a diagram's label."""
    words = []
    for word in re.sub(r"[\[\]]", " ", line).split():
        if word in ("…", "...") or re.fullmatch(r"[A-Z][A-Z_]+", word) or word.endswith(":"):
            break
        words.append(word)
    return " ".join(words)


def problems_of_commands(text: str, root: Any) -> list[str]:
    cleaned = [cleaned_line(line) for line in command_lines(text)]
    return [
        problem
        for line in cleaned
        for problem in command_problems(line, root) + hidden_problems(line, root)
    ]


def headings(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {anchor(heading) for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def link_problems(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    problems = []
    for link in LINK.findall(text):
        if re.match(r"[a-z]+:", link):
            continue  # http:, https:, mailto:
        target, _, fragment = link.partition("#")
        linked = (path.parent / target).resolve() if target else path
        if not linked.exists():
            problems.append(f"{path.name}: {link}: no file {target}")
        elif fragment and linked.suffix == ".md" and fragment not in headings(linked):
            problems.append(f"{path.name}: {link}: no heading #{fragment} in {linked.name}")
    return problems


def index_problems(index: Path, folder: Path) -> list[str]:
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index.read_text(encoding="utf-8")))
    return [
        f"{index.name} does not list {doc.name}"
        for doc in sorted(folder.glob("*.md"))
        if doc != index and doc.name not in listed
    ]


def front_door_problems(readme: str) -> list[str]:
    problems = []
    lines = readme.splitlines()
    if len(lines) > README_MAX_LINES:
        problems.append(f"README has {len(lines)} lines, more than {README_MAX_LINES}")
    sections = re.findall(r"^## (.+)$", readme, flags=re.M)
    contents = set(re.findall(r"^- \[[^\]]+\]\(#([^)]+)\)$", readme, flags=re.M))
    missing = [title for title in sections if anchor(title) not in contents]
    if not contents or missing:
        problems.append(f"README's table of contents lacks {missing or 'everything'}")
    return problems


def test_every_headway_command_and_flag_in_the_docs_exists_and_is_not_hidden() -> None:
    root = root_command()
    problems = []
    counted = 0
    for path in documents():
        text = path.read_text(encoding="utf-8")
        counted += len([line for line in command_lines(text) if "headway " in line])
        problems += [f"{path.name}: {problem}" for problem in problems_of_commands(text, root)]
    assert counted >= 100, counted
    assert not problems, "\n".join(problems)


def test_the_command_check_refuses_an_unknown_command_flag_or_hidden_alias() -> None:
    root = root_command()
    assert problems_of_commands("```sh\nheadway tenants sett acme\n```\n", root)
    assert problems_of_commands("```sh\nheadway up \\\n    --portt 9000\n```\n", root)
    assert problems_of_commands("Run `headway up [--no-such-flag]`.", root)
    assert problems_of_commands("```sh\nKEY=$(headway tenants ad acme | tail -1)\n```\n", root)
    hidden = [
        (name, sub)
        for name, sub in root.commands.items()
        if getattr(sub, "hidden", False) and not hasattr(sub, "commands")
    ]
    if hidden:  # the old names of issue 29, kept as hidden aliases
        assert problems_of_commands(f"`headway {hidden[0][0]}`", root)
    fake = typer.Typer()

    @fake.command()
    def shown() -> None: ...

    @fake.command(hidden=True)
    def old() -> None: ...

    planted = typer.main.get_command(fake)
    assert hidden_problems("headway old", planted)
    assert not hidden_problems("headway shown", planted)


def test_every_relative_link_and_anchor_resolves(tmp_path: Path) -> None:
    problems = [problem for path in documents() for problem in link_problems(path)]
    assert not problems, "\n".join(problems)
    planted = tmp_path / "planted.md"
    planted.write_text(
        "# Title\n\n[ok](#title) [gone](missing.md) [no anchor](#nowhere)\n"
        "`[code](not-a-link.md)`\n",
        encoding="utf-8",
    )
    assert len(link_problems(planted)) == 2


def test_the_docs_index_lists_every_document(tmp_path: Path) -> None:
    assert not index_problems(INDEX, INDEX.parent)
    (tmp_path / "index.md").write_text("- [a.md](a.md) — one\n", encoding="utf-8")
    (tmp_path / "a.md").write_text("# a\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# b\n", encoding="utf-8")
    assert index_problems(tmp_path / "index.md", tmp_path) == ["index.md does not list b.md"]


def test_the_readme_is_a_front_door_with_a_table_of_contents() -> None:
    readme = README.read_text(encoding="utf-8")
    assert not front_door_problems(readme)
    assert front_door_problems(readme + "\n" * README_MAX_LINES)
    assert front_door_problems(readme + "\n## A section nobody lists\n")
    assert front_door_problems(re.sub(r"^- \[.*$", "", readme, flags=re.M))
    assert "CPU" in readme.split("## ", 1)[0]  # what serves today, said at the top
