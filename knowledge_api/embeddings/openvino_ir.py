"""The encoder's products rewritten for OpenVINO's fp32 kernels: one copy of the weights.

save_ir rounds every weight to fp16. On fp16 weights, OpenVINO's fp32 path converted
and repacked a product's weights into memory of its own for each kind of input shape
on an AVX-512 CPU (a 1x1-convolution kernel whose blocking follows the row width:
rows under 64 tokens, 64 to 95, 96 or more): 40 MB for the first kind, 14 to 28 more
for each other, which answers' sentences met after queries. Stored as fp32 [out, in]
(the fp16 values, transposed), a product runs on MLAS, which packs its weights once
for every shape, reading the mapped file whose pages the encoder hands back
(runtimes.OpenVinoEncoder.release). bf16 packs a bf16 copy of its own either way.

MLAS takes no fused activation, and OpenVINO fuses BERT's GELU into the product before
it: written as z * (1 + erf(z)) / sqrt(2), with z = x / sqrt(2) folded into the
product's weights and bias, the GELU is not recognised, and the product stays MLAS's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

GELU_INPUT = ".intermediate.dense"
"""The products (named after their weights, onnx_graph.linear) whose output is GELU's
input, and the ones that read GELU's output."""
GELU_OUTPUT = ".output.dense"
ROOT_HALF = np.float32(1 / np.sqrt(2))


def dense_products(model: Any) -> None:
    """Every product by fp16 weights, in place, as one by fp32 weights [out, in]."""

    products = {
        node.get_friendly_name(): node
        for node in model.get_ordered_ops()
        if weights(node) is not None
    }
    for name, product in products.items():  # in graph order: a GELU before its reader
        if name.endswith(GELU_INPUT):
            reader = products[name.removesuffix(GELU_INPUT) + GELU_OUTPUT]
            reader.input(0).replace_source_output(unfused_gelu(product))
        else:
            product.output(0).replace(dense(product, np.float32(1)).output(0))


def weights(node: Any) -> np.ndarray | None:
    """A MatMul's fp16 weights [in, out] (a Convert of a 2-d Constant), if it has any."""
    if node.get_type_name() != "MatMul" or node.get_attributes()["transpose_b"]:
        return None
    convert = node.input_value(1).get_node()
    if convert.get_type_name() != "Convert":
        return None
    constant = convert.input_value(0).get_node()
    if constant.get_type_name() != "Constant" or len(constant.get_output_shape(0)) != 2:
        return None
    values: np.ndarray = constant.get_data()
    return values


def dense(product: Any, scale: np.float32) -> Any:
    """`product` on fp32 weights [out, in], times `scale`."""
    from openvino import opset13

    values = weights(product)
    assert values is not None
    stored = np.ascontiguousarray(values.T.astype(np.float32) * scale)
    transpose_a = product.get_attributes()["transpose_a"]
    node = opset13.matmul(product.input_value(0), opset13.constant(stored), transpose_a, True)
    node.set_friendly_name(product.get_friendly_name())
    return node


def unfused_gelu(product: Any) -> Any:
    """GELU of `product` plus its bias (its one reader), 0.5 x (1 + erf(x / sqrt(2))),
    as z (1 + erf(z)) / sqrt(2), z = x / sqrt(2) computed by the product."""
    from openvino import opset13

    (add,) = (target.get_node() for target in product.output(0).get_target_inputs())
    bias = add.input_value(1).get_node()
    if bias.get_type_name() == "Convert":
        bias = bias.input_value(0).get_node()
    shifted = bias.get_data().astype(np.float32) * ROOT_HALF
    z = opset13.add(dense(product, ROOT_HALF), opset13.constant(shifted))
    one_plus = opset13.add(opset13.erf(z), opset13.constant(np.float32(1)))
    return opset13.multiply(opset13.multiply(z, one_plus), opset13.constant(ROOT_HALF)).output(0)
