"""IR metrics against hand-computed cases, the BEIR reader, and `knowledge-api eval`."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import pytest
from pytest import approx

from knowledge_api import ir_metrics
from knowledge_api.cli import main
from knowledge_api.compose import build_service
from knowledge_api.errors import InvalidRequest
from knowledge_api.models import SearchHit
from knowledge_api.rerankers import rerankers
from knowledge_api.rerankers.base import OrderingReranker, RerankError
from knowledge_api.service import KnowledgeService
from knowledge_api.usecases import evaluation as ev
from tests.cli_env import cli_home
from tests.conftest import make_settings

RANKED = ["a", "b", "c"]
GRADES = {"b": 2, "c": 1, "x": 3}  # x is judged but never retrieved
DCG = 2 / math.log2(3) + 1 / math.log2(4)


def test_standard_ndcg_takes_the_ideal_over_every_judged_document() -> None:
    ideal = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ir_metrics.ndcg_at_k(RANKED, GRADES, 10) == approx(DCG / ideal)
    assert ir_metrics.ndcg_at_k(RANKED, GRADES, 1) == 0.0  # a is not relevant
    assert ir_metrics.ndcg_at_k(["x", "b", "c"], GRADES, 10) == approx(1.0)


def test_leaderboard_ndcg_takes_the_ideal_over_the_retrieved_list() -> None:
    ideal = 2 + 1 / math.log2(3)  # gains [0, 2, 1] reordered as [2, 1, 0]
    assert ir_metrics.leaderboard_ndcg_at_k(RANKED, GRADES, 10) == approx(DCG / ideal)
    assert ir_metrics.leaderboard_ndcg_at_k(["b", "a"], GRADES, 10) == 1.0  # x is never missed
    assert ir_metrics.leaderboard_ndcg_at_k(["a", "z"], GRADES, 10) == 0.0


def test_recall_and_mrr() -> None:
    assert ir_metrics.recall_at_k(RANKED, GRADES, 2) == approx(1 / 3)
    assert ir_metrics.recall_at_k(RANKED, GRADES, 10) == approx(2 / 3)
    assert ir_metrics.recall_at_k(RANKED, {"a": 0}, 10) == 0.0  # grade 0 is not relevant
    assert ir_metrics.mrr_at_k(RANKED, GRADES, 10) == 0.5
    assert ir_metrics.mrr_at_k(RANKED, GRADES, 1) == 0.0
    assert ir_metrics.mrr_at_k([], GRADES, 10) == 0.0


def test_aggregates() -> None:
    assert ir_metrics.distinct(["d1", "d2", "d1", "d3", "d2"]) == ["d1", "d2", "d3"]
    rows = [{"m": 1.0, "n": 0.0}, {"m": 0.5, "n": 0.25}]
    assert ir_metrics.mean_metrics(rows) == {"m": 0.75, "n": 0.125}
    assert ir_metrics.percentiles([1.0, 2.0, 3.0, 4.0, 100.0]) == {"p50": 3.0, "p95": 80.8}


def write_beir(folder: Path, header: bool = True) -> Path:
    """Six passages with distinct vocabularies and one judged query for four of them."""
    topics = {
        "d1": ("Volcanoes", "Basalt lava erupts from a volcano and cools into rock."),
        "d2": ("Tides", "The moon pulls the ocean and makes tides rise twice a day."),
        "d3": ("Bees", "Honey bees collect nectar and pollinate orchards."),
        "d4": ("Chess", "A knight moves in an L shape on the chessboard."),
        "d5": ("Bread", "Yeast ferments the dough so that bread rises in the oven."),
        "d6": ("Comets", "A comet grows a tail of ice and dust near the sun."),
    }
    (folder / "qrels").mkdir(parents=True)
    with (folder / "corpus.jsonl").open("w") as out:
        for doc_id, (title, text) in topics.items():
            out.write(json.dumps({"_id": doc_id, "title": title, "text": text}) + "\n")
    queries = {
        "q1": "basalt lava volcano",
        "q2": "moon tides ocean",
        "q3": "bees pollinate nectar",
        "q4": "knight chessboard",
        "q5": "unjudged question",
    }
    with (folder / "queries.jsonl").open("w") as out:
        for qid, text in queries.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    lines = ["query-id\tcorpus-id\tscore"] if header else []
    lines += ["q1\td1\t2", "q2\td2\t1", "q3\td3\t2", "q4\td4\t1", "q4\td6\t0"]
    (folder / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return folder


def test_beir_reader(tmp_path: Path) -> None:
    data = ev.load_beir(write_beir(tmp_path / "set"))
    assert [qid for qid, _ in data.judged] == ["q1", "q2", "q3", "q4"]
    assert data.qrels["q4"] == {"d4": 1, "d6": 0}
    headless = ev.read_qrels(write_beir(tmp_path / "plain", header=False) / "qrels" / "test.tsv")
    assert headless == data.qrels
    trec = tmp_path / "trec.tsv"
    trec.write_text("q1 0 d1 2\n")
    assert ev.read_qrels(trec) == {"q1": {"d1": 2}}
    trec.write_text("q1\td1\t2\nq2\td2\thigh\n")
    with pytest.raises(InvalidRequest, match=r"trec\.tsv:2: must be query-id, corpus-id, score"):
        ev.read_qrels(trec)
    with pytest.raises(InvalidRequest, match=r"corpus\.jsonl: missing"):
        ev.load_beir(tmp_path)
    queries = tmp_path / "queries.jsonl"
    queries.write_text('{"_id": 7, "text": "seven"}\n\n["not", "an", "object"]\n')
    with pytest.raises(InvalidRequest, match=r"queries\.jsonl:3: not a query record"):
        ev.read_queries(queries)
    queries.write_text('{"_id": 7, "text": "seven"}\n')
    assert ev.read_queries(queries) == {"7": "seven"}


async def test_evaluate_uses_a_temporary_collection(
    service: KnowledgeService, tmp_path: Path
) -> None:
    report = await ev.evaluate(service, write_beir(tmp_path / "set"))
    assert (report.documents, report.queries, report.kept) == (6, 4, False)
    assert report.collection.startswith("eval-")
    assert await service.collections() == {}
    keyword = report.modes["keyword"]
    # each query shares its rare words with exactly its judged passage
    assert keyword == {name: 1.0 for name in ev.EVAL_METRICS}
    for mode in ("hybrid", "vector"):
        assert set(report.modes[mode]) == set(ev.EVAL_METRICS)
        assert all(0.0 <= value <= 1.0 for value in report.modes[mode].values())
        assert report.latency_ms[mode]["p95"] >= report.latency_ms[mode]["p50"] > 0


def test_eval_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    folder = write_beir(tmp_path / "set")
    assert main(["eval", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report["modes"]) == {"hybrid", "vector", "keyword"}
    assert set(report["modes"]["hybrid"]) == set(ev.EVAL_METRICS)
    assert set(report["latency_ms"]["vector"]) == {"p50", "p95"}
    assert report["queries"] == 4 and report["documents"] == 6
    assert report["embedded"] == 6
    assert main(["eval", str(folder), "--collection", "bench"]) == 0
    table = capsys.readouterr().out
    assert "collection bench (kept), 6 passages embedded" in table
    assert [line.split()[0] for line in table.splitlines()[2:5]] == ["hybrid", "vector", "keyword"]
    assert main(["eval", str(folder), "--collection", "bench", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["embedded"] == 0  # the kept corpus is re-used
    assert main(["eval", str(tmp_path / "nowhere")]) == 2
    assert "missing" in capsys.readouterr().err


class UpsideDown(OrderingReranker):
    """Puts the best fused hit last: a reranker that can only hurt."""

    name = "upside-down"

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        return list(reversed(range(len(hits))))


class Refusing(OrderingReranker):
    name = "refusing"

    async def order(self, query: str, hits: Sequence[SearchHit]) -> list[int]:
        raise RerankError("no")


rerankers.register("upside-down", UpsideDown)
rerankers.register("refusing", Refusing)


async def evaluated(tmp_path: Path, reranker: str, rerank: bool) -> ev.EvalReport:
    service = build_service(make_settings(tmp_path, reranker=reranker, rerank_top=3))
    await service.start()
    try:
        return await ev.evaluate(service, write_beir(tmp_path / "set"), rerank=rerank)
    finally:
        await service.stop()


async def test_a_reranker_adds_a_row_and_leaves_the_modes_alone(tmp_path: Path) -> None:
    report = await evaluated(tmp_path, "upside-down", rerank=True)
    assert list(report.modes) == ["hybrid", "vector", "keyword", "hybrid+upside-down"]
    assert report.modes["hybrid"]["mrr@10"] == 1.0  # not reranked
    # the judged passage, first in hybrid, is third of the three reversed ones
    assert report.modes["hybrid+upside-down"]["mrr@10"] == approx(1 / 3, abs=1e-4)
    assert report.latency_ms["hybrid+upside-down"]["p50"] > 0 and report.degraded == {}
    table = report.table()
    assert "\nhybrid+upside-down " in table and "0.333" in table


async def test_without_rerank_no_row_is_added(tmp_path: Path) -> None:
    report = await evaluated(tmp_path, "upside-down", rerank=False)
    assert list(report.modes) == ["hybrid", "vector", "keyword"]


async def test_queries_whose_reranking_failed_are_counted(tmp_path: Path) -> None:
    report = await evaluated(tmp_path, "refusing", rerank=True)
    assert report.degraded == {"hybrid+refusing": 4}
    assert report.modes["hybrid+refusing"] == report.modes["hybrid"]  # the fused order
    assert "hybrid+refusing: 4 of 4 queries came back with a warning" in report.table()


def report_of(hybrid: float, vector: float, keyword: float, lb: float) -> ev.EvalReport:
    def row(ndcg: float, lb_ndcg: float) -> dict[str, float]:
        return {name: 0.5 for name in ev.EVAL_METRICS} | {
            "ndcg@10": ndcg,
            "leaderboard_ndcg@10": lb_ndcg,
        }

    modes = {"hybrid": row(hybrid, lb), "vector": row(vector, 0.9), "keyword": row(keyword, 0.8)}
    latency = {mode: {"p50": 1.0, "p95": 2.0} for mode in modes}
    return ev.EvalReport(10, 5, "c", False, 10, 1.0, modes, latency)


def test_the_verdict_says_whether_hybrid_beat_both_single_rankings() -> None:
    report = report_of(hybrid=0.817, vector=0.798, keyword=0.732, lb=0.9)
    assert report.hybrid_beats_single() == {"ndcg@10": True, "leaderboard_ndcg@10": False}
    assert report.table().splitlines()[-1] == (
        "hybrid beat both single rankings: nDCG@10 yes (0.817 vs vector 0.798, keyword "
        "0.732); lb nDCG@10 no (0.900 vs vector 0.900, keyword 0.800)"
    )
    # beaten by one single ranking, or level with it as printed, is no win
    assert report_of(0.70, 0.71, 0.6, 0.95).hybrid_beats_single() == {
        "ndcg@10": False,
        "leaderboard_ndcg@10": True,
    }
    assert report_of(0.8001, 0.8004, 0.6, 0.95).hybrid_beats_single() == {
        "ndcg@10": False,
        "leaderboard_ndcg@10": True,
    }


def test_no_verdict_without_every_mode() -> None:
    report = report_of(0.9, 0.8, 0.7, 0.95)
    del report.modes["keyword"]
    assert report.hybrid_beats_single() is None
    assert "hybrid beat" not in report.table()


def test_eval_command_with_a_reranker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cli_home(tmp_path, monkeypatch)
    monkeypatch.setenv("KNOWLEDGE_RERANKER", "refusing")  # not used by eval unless named
    folder = write_beir(tmp_path / "set")
    assert main(["eval", str(folder), "--reranker", "upside-down", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert list(report["modes"]) == ["hybrid", "vector", "keyword", "hybrid+upside-down"]
    assert set(report["latency_ms"]["hybrid+upside-down"]) == {"p50", "p95"}
    assert report["degraded"] == {}
    verdict = report["hybrid_beats_single"]
    assert set(verdict) == {"ndcg@10", "leaderboard_ndcg@10"}
    assert all(isinstance(value, bool) for value in verdict.values())
    assert main(["eval", str(folder)]) == 0
    table = capsys.readouterr().out
    assert "hybrid+" not in table and "warning" not in table
    assert "hybrid beat both single rankings: nDCG@10 " in table
