"""Git history as a source: one document per commit, read with `git log`.

Each commit becomes a `git` document whose source_id is its full hash: its title is
the subject line, its content the whole message followed by the changed paths, and
its metadata the author, the author date in UTC, the branch, the paths and the
repository's name. Commit hashes never change, so a re-run finds every old commit's
document stored with the same content hash and the pipeline skips it without
embedding anything.

`git log` runs with NUL-separated fields (`-z`): a message or a path can hold any
character but NUL, and each commit starts with a marker no path can be mistaken for.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from knowledge_api import validation
from knowledge_api.errors import ConfigurationError, InvalidRequest
from knowledge_api.models import DEFAULT_COLLECTION, Document

MARKER = "\x1ecommit "
LOG_FORMAT = f"{MARKER}%H%x00%an%x00%at%x00%B"
PATHS_IN_CONTENT = 100
PATHS_IN_METADATA = 500


@dataclass(frozen=True)
class Commit:
    hash: str
    author: str
    date: str
    """Author date, ISO 8601 in UTC."""
    message: str
    paths: tuple[str, ...]

    @property
    def subject(self) -> str:
        return self.message.split("\n", 1)[0].strip()


@dataclass(frozen=True)
class GitOptions:
    since: str | None = None
    """Only commits made after this ISO date (git's --since)."""
    branch: str | None = None
    """Default: the branch checked out."""
    base_url: str = ""
    """A URL pattern with {hash} (and optionally {short}), e.g.
    https://git.example.com/repo/commit/{hash}"""
    collection: str = DEFAULT_COLLECTION


@dataclass(frozen=True)
class Repository:
    path: Path
    name: str
    branch: str


def open_repository(path: Path, branch: str | None) -> Repository:
    """The repository's top folder and the branch to read; InvalidRequest when the path
    is not a git repository or the branch does not exist."""
    if not path.is_dir():
        raise InvalidRequest(str(path), "no such folder")
    not_a_repo = {"field": str(path), "rule": "not a git repository"}
    bare = git(path, "rev-parse", "--is-bare-repository", **not_a_repo) == "true"
    where = "--absolute-git-dir" if bare else "--show-toplevel"  # billing.git or billing/
    top = Path(git(path, "rev-parse", where, **not_a_repo))
    if branch is None:
        branch = git(path, "rev-parse", "--abbrev-ref", "HEAD", field=str(path), rule="no commits")
    git(
        path,
        "rev-parse",
        "--verify",
        "--quiet",
        f"{branch}^{{commit}}",
        field="--branch",
        rule=f"no branch or commit {branch!r} in {path}",
    )
    return Repository(top, top.name.removesuffix(".git"), branch)


def check_options(options: GitOptions) -> None:
    """Usage errors before anything is read: a --since that is not a date, a --base-url
    without {hash}."""
    if options.since is not None:
        since_argument(options.since)
    if options.base_url:
        try:
            filled = options.base_url.format(hash="0", short="0")
        except (KeyError, IndexError, ValueError) as e:
            raise InvalidRequest(
                "--base-url", f"only {{hash}} and {{short}} may be named ({e})"
            ) from e
        if filled == options.base_url:
            raise InvalidRequest("--base-url", "must contain {hash}, e.g. .../commit/{hash}")


def since_argument(since: str) -> str:
    """An ISO date as git's --since reads it exactly: midnight UTC for a bare date (git
    would take the current time of day on that date), UTC for a time without offset."""
    try:
        moment = datetime.fromisoformat(since)
    except ValueError as e:
        raise InvalidRequest("--since", "takes an ISO date such as 2026-01-31") from e
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def git(path: Path, *args: str, field: str, rule: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(path), *args], capture_output=True, text=True, check=False
        )
    except FileNotFoundError as e:
        raise ConfigurationError("git is not installed or not on PATH") from e
    if done.returncode != 0:
        stderr = done.stderr.strip().splitlines()
        raise InvalidRequest(field, f"{rule} ({stderr[-1]})" if stderr else rule)
    return done.stdout.strip()


def commits(repo: Repository, since: str | None = None) -> Iterator[Commit]:
    """The commits of the branch, newest first, streamed from one `git log`."""
    args = ["git", "-C", str(repo.path), "log", "-z", "--name-only", f"--format={LOG_FORMAT}"]
    if since is not None:
        args.append(f"--since={since_argument(since)}")
    args += [repo.branch, "--"]
    # stderr goes to a file: a pipe nobody reads while stdout streams could fill and stall git
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=errors) as process,
    ):
        assert process.stdout is not None
        yield from parse_log(read_records(process.stdout))
        process.wait()
        errors.seek(0)
        stderr = errors.read().decode(errors="replace").strip()
    if process.returncode != 0:
        raise InvalidRequest(str(repo.path), f"git log failed: {stderr}")


def read_records(stream: Any, size: int = 1 << 16) -> Iterator[str]:
    """The text of each commit record, split at MARKER as the bytes arrive."""
    marker = MARKER.encode()
    pending = b""
    while chunk := stream.read(size):
        pending += chunk
        *complete, pending = pending.split(marker)
        for record in complete:
            if record:
                yield record.decode("utf-8", errors="replace")
    if pending:
        yield pending.decode("utf-8", errors="replace")


def parse_log(records: Iterator[str]) -> Iterator[Commit]:
    """One record: hash NUL author NUL timestamp NUL message NUL [\\n path NUL ...]."""
    for record in records:
        fields = record.split("\x00")
        commit_hash, author, timestamp, message = fields[:4]
        paths = tuple(path.lstrip("\n") for path in fields[4:] if path.strip("\n"))
        date = datetime.fromtimestamp(int(timestamp), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        yield Commit(commit_hash, author, date, message.strip(), paths)


def commit_document(commit: Commit, repo: Repository, options: GitOptions) -> Document:
    shown = list(commit.paths[:PATHS_IN_CONTENT])
    more = len(commit.paths) - len(shown)
    listing = "\n".join(f"- {path}" for path in shown)
    if more:
        listing += f"\n- … and {more} more"
    content = f"{commit.message}\n\nChanged paths:\n\n{listing}" if shown else commit.message
    metadata: dict[str, Any] = {
        "repo": repo.name,
        "branch": repo.branch,
        "author": commit.author,
        "date": commit.date,
        "paths": list(commit.paths[:PATHS_IN_METADATA]),
        "format": "git",
    }
    if len(commit.paths) > PATHS_IN_METADATA:
        metadata["paths_total"] = len(commit.paths)
    if options.base_url:
        metadata["url"] = options.base_url.format(hash=commit.hash, short=commit.hash[:12])
    committed = validation.utc_text(datetime.fromisoformat(commit.date))
    return Document(
        source_type="git",
        source_id=commit.hash,
        content=content,
        title=commit.subject or commit.hash[:12],
        metadata=metadata,
        collection=options.collection,
        created_at=committed,
        updated_at=committed,
    )


def load_git(path: Path, options: GitOptions) -> list[Document]:
    """The branch's commits as documents; InvalidRequest for a bad repository, branch or
    option, raised before any commit is read."""
    check_options(options)
    repo = open_repository(path, options.branch)
    return [commit_document(c, repo, options) for c in commits(repo, options.since)]
