"""A corpus of every source type with judged queries, for routing and prefetch figures.

- wiki: MS MARCO dev passages (every relevant one, plus a random sample of the rest), with the 43
  judged MS MARCO queries;
- knowledge: the bundled docs, each `## heading` asked as a question of its page;
- git: this repository's own history (`git log`), each commit asked for as "which
  commit ..." with the words of its subject;
- jira, email, metrics: small synthetic sets made from templates, each asked for
  once, some with a cue word ("ticket", "e-mail"), some without.

Every query is judged at document level (source ids), as `knowledge-api eval` judges.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from knowledge_api.ingest.git_source import GitOptions, load_git
from knowledge_api.ingest.loaders import LoadOptions, load_paths
from knowledge_api.models import Document
from knowledge_api.usecases.evaluation import load_beir

COMPONENTS = [
    "query endpoint",
    "ingest CLI",
    "SQLite store",
    "Qdrant store",
    "MCP server",
    "embedding cache",
    "answer route",
    "KB sync",
    "rate limiter",
    "health check",
]
SYMPTOMS = [
    "returns a 500 on an empty body",
    "hangs when the database file is locked",
    "leaks memory under load",
    "ignores the collection filter",
    "logs the API key in plain text",
    "times out after 30 seconds",
]
TEAMS = ["platform", "search", "support", "release"]
EVENTS = [
    "release 4.{n} moves to {day}",
    "the {team} offsite is on {day}",
    "on-call handover for the {team} team happens {day}",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
MEASURES = [
    "p95 query latency",
    "cache hit rate",
    "ingest throughput",
    "error rate of /answer",
    "disk usage of the store",
]


@dataclass
class Mixed:
    documents: list[Document] = field(default_factory=list)
    queries: dict[str, str] = field(default_factory=dict)
    """query id -> text"""
    grades: dict[str, dict[str, int]] = field(default_factory=dict)
    """query id -> source id -> grade"""
    expected: dict[str, str] = field(default_factory=dict)
    """query id -> the source type of its answer"""

    def ask(self, qid: str, text: str, source_type: str, relevant: dict[str, int]) -> None:
        self.queries[qid] = text
        self.grades[qid] = relevant
        self.expected[qid] = source_type


def build(msmarco: Path, repo: Path, wiki_sample: int = 1500, seed: int = 0) -> Mixed:
    rng = random.Random(seed)
    mixed = Mixed()
    add_wiki(mixed, msmarco, wiki_sample, rng)
    add_docs(mixed)
    add_git(mixed, repo)
    add_synthetic(mixed, rng)
    return mixed


def add_wiki(mixed: Mixed, folder: Path, sample: int, rng: random.Random) -> None:
    beir = load_beir(folder)
    relevant = {pid for grades in beir.qrels.values() for pid, g in grades.items() if g > 0}
    rows = [json.loads(line) for line in (folder / "corpus.jsonl").open()]
    others = [r for r in rows if r["_id"] not in relevant]  # hard negatives among them
    kept = [r for r in rows if r["_id"] in relevant] + rng.sample(others, min(sample, len(others)))
    for r in kept:
        mixed.documents.append(Document("wiki", r["_id"], r["text"], r.get("title") or ""))
    for qid, text in beir.queries.items():
        if beir.qrels.get(qid):
            mixed.ask(f"msm-{qid}", text, "wiki", beir.qrels[qid])


def add_docs(mixed: Mixed) -> None:
    folder = Path(str(resources.files("knowledge_api").joinpath("docs")))
    docs = list(load_paths([folder], LoadOptions(source_type="knowledge")))
    mixed.documents += docs
    for doc in docs:
        for n, heading in enumerate(re.findall(r"^## (.+)$", doc.content, re.M)):
            words = re.sub(r"[`#*]", "", heading).strip()
            if len(words.split()) >= 2:
                mixed.ask(f"kb-{doc.source_id}-{n}", words, "knowledge", {doc.source_id: 1})


def add_git(mixed: Mixed, repo: Path) -> None:
    commits = load_git(repo, GitOptions())
    mixed.documents += commits
    for doc in commits[::3]:
        subject = " ".join(doc.title.split()[:9]).rstrip(".,:")
        text = f"which commit made this change: {subject[0].lower()}{subject[1:]}"
        mixed.ask(f"git-{doc.source_id[:8]}", text, "git", {doc.source_id: 1})


def add_synthetic(mixed: Mixed, rng: random.Random) -> None:
    n = 0
    for component in COMPONENTS:
        for symptom in rng.sample(SYMPTOMS, 3):
            n += 1
            key = f"KAPI-{100 + n}"
            text = (
                f"The {component} {symptom}. Steps to reproduce are attached; the "
                f"{rng.choice(TEAMS)} team triaged it as priority {rng.randint(1, 4)}."
            )
            mixed.documents.append(Document("jira", key, text, f"{component} {symptom}"))
            if n % 3 == 0:
                cue = "the ticket about " if n % 2 else ""
                mixed.ask(f"jira-{key}", f"{cue}{component} {symptom}", "jira", {key: 1})
    for i in range(30):
        event = rng.choice(EVENTS).format(n=i, day=rng.choice(DAYS), team=rng.choice(TEAMS))
        key = f"msg-{i}"
        text = f"Hi all, a quick note: {event}. Reply to this e-mail with questions. Thanks!"
        mixed.documents.append(Document("email", key, text, event.capitalize()))
        if i % 3 == 0:
            cue = "the e-mail saying " if i % 2 else ""
            mixed.ask(f"email-{key}", f"{cue}{event}", "email", {key: 1})
    for i in range(30):
        measure = rng.choice(MEASURES)
        value = rng.randint(2, 900)
        key = f"metric-{i}"
        text = f"Week {i + 1}: {measure} was {value}, {rng.choice(['up', 'down'])} on last week."
        mixed.documents.append(Document("metrics", key, text, f"{measure}, week {i + 1}"))
        if i % 3 == 0:
            mixed.ask(f"metrics-{key}", f"{measure} in week {i + 1}", "metrics", {key: 1})
