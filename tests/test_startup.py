"""Starting the service: every refusal before any work, then the seed of an empty store
in the background while the service answers."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli.serve import ready_message
from knowledge_api.embeddings.fake import FakeEmbedder
from knowledge_api.errors import ConfigurationError
from knowledge_api.models import Progress
from tests.conftest import make_settings, make_store, seeded
from tests.test_cli import written_by_another_embedder


class Counted(FakeEmbedder):
    """Counts its loads; its document batches wait for `gate` (set: they run at once)."""

    def __init__(self) -> None:
        super().__init__()
        self.loads = 0
        self.gate = threading.Event()
        self.gate.set()

    def load(self) -> None:
        self.loads += 1

    def embed_documents(self, texts: Sequence[str], progress: Progress | None = None) -> np.ndarray:
        assert self.gate.wait(30), "the test never let the seed go on"
        return super().embed_documents(texts, progress)


def seed_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "seed"
    folder.mkdir()
    for name, text in [("a", "Alpha rockets"), ("b", "Bravo boats"), ("c", "Charlie cars")]:
        (folder / f"{name}.md").write_text(f"# {name}\n\n{text} are described here at length.")
    return folder


async def documents_in(settings: object) -> int:
    store = make_store("sqlite", settings)  # type: ignore[arg-type]
    await store.open()
    try:
        return await store.count()
    finally:
        await store.close()


@pytest.mark.parametrize("refusal", ["keys required, none exists", "another embedder's store"])
def test_every_refusal_comes_before_the_model_loads_and_anything_is_written(
    tmp_path: Path, refusal: str
) -> None:
    """It seeded an empty store with the bundled docs (minutes on a slow CPU), and only
    then refused to start."""
    settings = make_settings(tmp_path, seed_on_empty=True, seed_path=str(seed_folder(tmp_path)))
    if refusal == "keys required, none exists":
        settings = settings.replace(host="0.0.0.0", auth="auto", allowed_hosts="*")
        said = "API keys are required"
    else:
        asyncio.run(written_by_another_embedder(Path(settings.db_path)))
        said = "holds vectors of embedder 'another:model'"
    app = create_app(settings)
    embedder = app.state.service.embedder = Counted()
    with pytest.raises(ConfigurationError, match=said), TestClient(app):
        pass
    assert embedder.loads == 0 and embedder.texts_embedded == 0
    assert asyncio.run(documents_in(settings)) == 0


def test_the_service_answers_while_it_seeds_and_says_how_far_it_is(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, seed_on_empty=True, seed_path=str(seed_folder(tmp_path)))
    app = create_app(settings)
    embedder = app.state.service.embedder = Counted()
    embedder.gate.clear()  # the seed's first batch waits: the service is up meanwhile
    with TestClient(app) as client:
        health = client.get("/health").json()
        assert health["seeding"] == {"done": 0, "total": 3}
        assert client.get("/readyz").json() == {"status": "ready"}
        assert "seeding the empty store in the background (0 of 3 documents so far)" in (
            ready_message(settings, app.state.service)
        )
        asked = {"query": "alpha rockets", "synthesize": False, "threshold": 0}
        early = client.post("/v1/knowledge/query", json=asked)
        assert early.status_code == 200 and early.json()["results"] == []
        embedder.gate.set()
        seeded(client)
        assert "seeding" not in client.get("/health").json()
        assert "seeding" not in ready_message(settings, app.state.service)
        late = client.post("/v1/knowledge/query", json={**asked, "query": "alpha rockets!"})
        assert late.json()["results"][0]["metadata"]["title"] == "a"


def test_a_seam_replaced_after_construction_serves_every_part(tmp_path: Path) -> None:
    """The service's parts read the seams through the engine when called: an embedder
    set on the service after it was built embeds documents, answers /health and is
    named in the ranking a rating is judged by."""
    from knowledge_api.compose import build_service
    from knowledge_api.models import SearchParams

    async def replaced() -> tuple[FakeEmbedder, dict[str, object], str, str]:
        service = build_service(make_settings(tmp_path))
        other = FakeEmbedder(dimension=48)
        service.embedder = other
        await service.start()
        try:
            vectors = await service.embed_documents(["a passage"])
            health = await service.health()
            ranking = service.trail.ranking(SearchParams("a question"))
            return other, health, str(ranking["embedder"]), str(vectors.shape)
        finally:
            await service.stop()

    other, health, embedder, shape = asyncio.run(replaced())
    assert other.calls >= 1 and shape == "(1, 48)"
    assert health["embedder"]["name"] == other.name  # type: ignore[index]
    assert embedder == other.name
