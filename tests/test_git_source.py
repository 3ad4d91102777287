from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from knowledge_api.errors import ConfigurationError, InvalidRequest
from knowledge_api.ingest.git_source import GitOptions, load_git, parse_log, read_records
from knowledge_api.service import KnowledgeService
from tests.conftest import fake_embedder
from tests.documents import commit, git_repo, many_commits, run_git


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = git_repo(tmp_path / "billing")
    commit(repo, "Add the invoice service", {"src/invoice.py": "1"}, "2026-01-05T10:00:00+02:00")
    commit(
        repo,
        "Fix rounding of totals\n\nTotals were rounded per line instead of per invoice.",
        {"src/invoice.py": "2", "docs/odd name\twith tab.md": "x"},
        "2026-02-10T09:30:00Z",
        author="Bob Builder",
    )
    return repo


def test_commits_become_git_documents(repo: Path) -> None:
    url = "https://git.example.com/billing/commit/{hash}"
    docs = load_git(repo, GitOptions(base_url=url, collection="eng"))
    newest, oldest = docs
    head = run_git(repo, "rev-parse", "HEAD").strip()
    assert (newest.source_type, newest.source_id, newest.collection) == ("git", head, "eng")
    assert newest.title == "Fix rounding of totals"
    assert newest.content == (
        "Fix rounding of totals\n\nTotals were rounded per line instead of per invoice.\n\n"
        "Changed paths:\n\n- docs/odd name\twith tab.md\n- src/invoice.py"
    )
    assert newest.metadata == {
        "repo": "billing",
        "branch": "main",
        "author": "Bob Builder",
        "date": "2026-02-10T09:30:00Z",
        "paths": ["docs/odd name\twith tab.md", "src/invoice.py"],
        "format": "git",
        "url": f"https://git.example.com/billing/commit/{head}",
    }
    assert oldest.metadata["date"] == "2026-01-05T08:00:00Z"  # author date in UTC


def test_since_and_branch(repo: Path) -> None:
    run_git(repo, "checkout", "-q", "-b", "feature")
    commit(repo, "Feature work", {"src/feature.py": "f"}, "2026-03-01T12:00:00Z")
    run_git(repo, "checkout", "-q", "main")
    titles = [d.title for d in load_git(repo, GitOptions(since="2026-02-01"))]
    assert titles == ["Fix rounding of totals"]
    # a bare date is that day's midnight UTC, not the current time of day on it as in git
    titles = [d.title for d in load_git(repo, GitOptions(since="2026-02-10"))]
    assert titles == ["Fix rounding of totals"]
    assert load_git(repo, GitOptions(since="2026-02-10T10:00:00+01:00")) != []
    assert load_git(repo, GitOptions(since="2026-02-10T09:31:00")) == []
    feature = load_git(repo, GitOptions(branch="feature", since="2026-02-01"))
    assert [(d.title, d.metadata["branch"]) for d in feature] == [
        ("Feature work", "feature"),
        ("Fix rounding of totals", "feature"),
    ]


def test_a_bare_clone_and_a_subfolder_are_read(repo: Path, tmp_path: Path) -> None:
    run_git(tmp_path, "clone", "-q", "--bare", str(repo), str(tmp_path / "mirror" / "billing.git"))
    bare = load_git(tmp_path / "mirror" / "billing.git", GitOptions())
    inside = load_git(repo / "src", GitOptions())
    for docs in (bare, inside):
        assert [(d.metadata["repo"], d.metadata["branch"]) for d in docs] == [
            ("billing", "main")
        ] * 2
    assert [d.source_id for d in bare] == [d.source_id for d in inside]


def test_messages_and_paths_that_look_like_records_parse() -> None:
    """A message with blank lines and an empty commit between two with paths."""
    log = (
        b"\x1ecommit aaa\x00Ann\x001767225600\x00First\n\nbody\n\x00\na.txt\x00b c.txt\x00"
        b"\x1ecommit bbb\x00Bob\x001767225601\x00Empty\n\x00"
        b"\x1ecommit ccc\x00Cy\x001767225602\x00Last\n\x00\n" + b"0123456789" * 4 + b"\x00"
    )

    class Stream:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def read(self, size: int) -> bytes:
            piece, self.data = self.data[:size], self.data[size:]
            return piece

    commits = list(parse_log(read_records(Stream(log), size=7)))
    assert [(c.hash, c.message, c.paths) for c in commits] == [
        ("aaa", "First\n\nbody", ("a.txt", "b c.txt")),
        ("bbb", "Empty", ()),
        ("ccc", "Last", ("0123456789" * 4,)),  # a path that looks like a hash
    ]
    assert commits[0].date == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("path", "options", "message"),
    [
        ("missing", GitOptions(), "no such folder"),
        ("plain", GitOptions(), "not a git repository"),
        ("billing", GitOptions(branch="nope"), "no branch or commit 'nope'"),
        ("billing", GitOptions(since="last tuesday"), "--since: takes an ISO date"),
        ("billing", GitOptions(base_url="https://x/commit"), "must contain {hash}"),
        ("billing", GitOptions(base_url="https://x/{sha}"), "only {hash} and {short}"),
    ],
)
def test_bad_repository_or_options_are_usage_errors(
    repo: Path, path: str, options: GitOptions, message: str
) -> None:
    (repo.parent / "plain").mkdir()
    with pytest.raises(InvalidRequest, match=message):
        load_git(repo.parent / path, options)


def test_without_git_on_path_the_error_says_so(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(repo))  # a folder without a git executable
    with pytest.raises(ConfigurationError, match="git is not installed"):
        load_git(repo, GitOptions())


async def test_a_rerun_indexes_only_new_commits(
    tmp_path: Path, service: KnowledgeService, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = git_repo(tmp_path / "big")
    many_commits(repo, 400)
    first = await service.ingest(load_git(repo, GitOptions()))
    assert (first.documents, first.skipped) == (400, 0)
    embedded = fake_embedder(service).texts_embedded
    commit(repo, "Change 400", {"m0.py": "new"}, "2026-01-01T07:00:00Z")
    commit(repo, "Change 401", {"m1.py": "new"}, "2026-01-01T07:01:00Z")
    started: list[list[str]] = []

    class Counted(subprocess.Popen):  # type: ignore[type-arg]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            started.append(args[0])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Counted)
    second = await service.ingest(load_git(repo, GitOptions()))
    assert (second.documents, second.skipped) == (2, 400)
    assert fake_embedder(service).texts_embedded == embedded + 2
    logs = [args for args in started if "log" in args]
    assert len(logs) == 1 and len(started) < 10, started  # one pass, not a git per commit
