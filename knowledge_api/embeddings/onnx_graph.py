"""An ONNX graph of a BERT sentence encoder, built from its safetensors weights.

The graph takes `input_ids` and `attention_mask` ([batch, sequence], int64) and
returns `embeddings` ([batch, hidden], float32): the last hidden state mean-pooled
over the attention mask, then scaled to unit length, as sentence-transformers'
all-MiniLM-L6-v2 does. token_type_ids are all zero for a single text, so the first
token-type row is folded into the position table instead of being an input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
MS_DOMAIN = "com.microsoft"
"""onnxruntime's contrib operators (Attention)."""


@dataclass(frozen=True)
class BertShape:
    layers: int
    hidden: int
    heads: int
    eps: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> BertShape:
        if config.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"unsupported activation {config['hidden_act']!r}")
        return cls(
            layers=int(config["num_hidden_layers"]),
            hidden=int(config["hidden_size"]),
            heads=int(config["num_attention_heads"]),
            eps=float(config.get("layer_norm_eps", 1e-12)),
        )


class GraphBuilder:
    """Accumulates nodes and initializers; each helper returns its output's name.

    Initializers are written into the model's graph as they come: gathered in a list
    and handed to onnx's make_graph and make_model, each weight was held three times
    over (a build peaked at 570 MB; 230 this way)."""

    def __init__(self, weights: Mapping[str, np.ndarray], prefix: str) -> None:
        self.weights = weights
        self.prefix = prefix
        self.model = onnx.ModelProto()
        self.nodes: list[Any] = []
        self._names = 0

    def fresh(self, hint: str) -> str:
        self._names += 1
        return f"{hint}_{self._names}"

    def const(self, hint: str, value: np.ndarray) -> str:
        name = self.fresh(hint)
        self.model.graph.initializer.add().CopyFrom(numpy_helper.from_array(value, name))
        return name

    def array(self, key: str) -> np.ndarray:
        return np.asarray(self.weights[self.prefix + key], dtype=np.float32)

    def weight(self, key: str, transpose: bool = False) -> str:
        value = self.array(key)
        return self.const(key, np.ascontiguousarray(value.T if transpose else value))

    def op(self, op_type: str, *inputs: str, name: str = "", **attrs: Any) -> str:
        out = self.fresh(op_type.lower())
        node = helper.make_node(op_type, list(inputs), [out], name=name or out, **attrs)
        self.nodes.append(node)
        return out

    def linear(self, x: str, key: str) -> str:
        """Transformers keeps Linear weights as [out, in]: x @ W.T + b. The MatMul is
        named after the weights' key, so quantisation can pick layers by name."""
        weight = self.weight(f"{key}.weight", transpose=True)
        product = self.op("MatMul", x, weight, name=key)
        return self.op("Add", product, self.weight(f"{key}.bias"))

    def layer_norm(self, x: str, key: str, eps: float) -> str:
        return self.op(
            "LayerNormalization",
            x,
            self.weight(f"{key}.weight"),
            self.weight(f"{key}.bias"),
            axis=-1,
            epsilon=eps,
        )

    def gelu(self, x: str) -> str:
        """The exact (erf) GELU of BERT; onnxruntime fuses this pattern into one op."""
        scaled = self.op("Div", x, self.const("sqrt2", np.array(math.sqrt(2.0), np.float32)))
        erf = self.op("Erf", scaled)
        one_plus = self.op("Add", erf, self.const("one", np.array(1.0, np.float32)))
        half_x = self.op("Mul", x, self.const("half", np.array(0.5, np.float32)))
        return self.op("Mul", half_x, one_plus)


def build_model(weights: Mapping[str, np.ndarray], config: Mapping[str, Any]) -> Any:
    """The encoder as an onnx ModelProto; `weights` as safetensors.numpy loads them.
    Unchecked: check it saved (onnx_model.build), where the checker reads the graph
    without its weights (in memory, it serialises the whole model once more)."""
    shape = BertShape.from_config(config)
    g = GraphBuilder(weights, weight_prefix(weights))
    x = embed(g, shape)
    mask = attention_mask(g)
    for layer in range(shape.layers):
        x = encoder_layer(g, shape, x, mask, f"encoder.layer.{layer}")
    pooled = mean_pool(g, x)
    return finish(g, unit_length(g, pooled), shape.hidden)


def weight_prefix(weights: Mapping[str, np.ndarray]) -> str:
    for prefix in ("", "bert."):
        if f"{prefix}embeddings.word_embeddings.weight" in weights:
            return prefix
    raise ValueError("no BERT embeddings.word_embeddings.weight among the weights")


def embed(g: GraphBuilder, shape: BertShape) -> str:
    words = g.op("Gather", g.weight("embeddings.word_embeddings.weight"), "input_ids", axis=0)
    type_zero = g.weights[g.prefix + "embeddings.token_type_embeddings.weight"][0]
    table = g.weights[g.prefix + "embeddings.position_embeddings.weight"] + type_zero
    positions = g.const("positions", np.ascontiguousarray(table, dtype=np.float32))
    length = g.op(
        "Slice",
        g.op("Shape", "input_ids"),
        g.const("one_i", np.array([1], np.int64)),
        g.const("two_i", np.array([2], np.int64)),
    )
    used = g.op("Slice", positions, g.const("zero_i", np.array([0], np.int64)), length)
    summed = g.op("Add", words, used)
    return g.layer_norm(summed, "embeddings.LayerNorm", shape.eps)


def attention_mask(g: GraphBuilder) -> str:
    """The Attention op's raw [batch, sequence] mask: 1 for tokens, 0 for padding."""
    return g.op("Cast", "attention_mask", to=TensorProto.INT32)


def encoder_layer(g: GraphBuilder, shape: BertShape, x: str, mask: str, key: str) -> str:
    attended = self_attention(g, shape, x, mask, f"{key}.attention.self")
    projected = g.linear(attended, f"{key}.attention.output.dense")
    x = g.layer_norm(g.op("Add", projected, x), f"{key}.attention.output.LayerNorm", shape.eps)
    inner = g.gelu(g.linear(x, f"{key}.intermediate.dense"))
    out = g.linear(inner, f"{key}.output.dense")
    return g.layer_norm(g.op("Add", out, x), f"{key}.output.LayerNorm", shape.eps)


def self_attention(g: GraphBuilder, shape: BertShape, x: str, mask: str, key: str) -> str:
    """onnxruntime's fused Attention (com.microsoft): one [hidden, 3 * hidden] projection
    for query, key and value, scaled dot-product per head, padding masked out."""
    parts = ("query", "key", "value")
    weight = np.concatenate([g.array(f"{key}.{p}.weight").T for p in parts], axis=1)
    bias = np.concatenate([g.array(f"{key}.{p}.bias") for p in parts])
    return g.op(
        "Attention",
        x,
        g.const(f"{key}.qkv.weight", np.ascontiguousarray(weight)),
        g.const(f"{key}.qkv.bias", bias),
        mask,
        name=f"{key}.attention",
        domain=MS_DOMAIN,
        num_heads=shape.heads,
    )


def mean_pool(g: GraphBuilder, x: str) -> str:
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    weights = g.op("Unsqueeze", mask, g.const("axis", np.array([-1], np.int64)))
    axis = g.const("axis", np.array([1], np.int64))
    summed = g.op("ReduceSum", g.op("Mul", x, weights), axis, keepdims=0)  # [batch, hidden]
    counts = g.op("ReduceSum", weights, axis, keepdims=0)  # [batch, 1]
    floor = g.const("tiny", np.array(1e-9, np.float32))
    return g.op("Div", summed, g.op("Max", counts, floor))


def unit_length(g: GraphBuilder, x: str) -> str:
    norms = g.op("ReduceL2", x, axes=[-1], keepdims=1)
    return g.op("Div", x, g.op("Max", norms, g.const("tiny", np.array(1e-12, np.float32))))


def finish(g: GraphBuilder, output: str, hidden: int) -> Any:
    g.nodes.append(helper.make_node("Identity", [output], ["embeddings"]))
    tokens = ["batch", "sequence"]
    model = g.model
    model.graph.name = "sentence_encoder"
    model.graph.node.extend(g.nodes)
    model.graph.input.extend(
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, tokens),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, tokens),
        ]
    )
    model.graph.output.append(
        helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", hidden])
    )
    model.opset_import.extend([helper.make_opsetid("", OPSET), helper.make_opsetid(MS_DOMAIN, 1)])
    model.ir_version = 8
    return model
