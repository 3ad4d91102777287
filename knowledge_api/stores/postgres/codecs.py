"""How asyncpg reads and writes the schema's types: jsonb as Python objects and pgvector's
vectors as float32 arrays, both in the binary format (which COPY needs)."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson


async def register_codecs(conn: Any) -> None:
    """jsonb as Python objects, in the binary format (which COPY needs); pgvector's
    binary format as float32 arrays."""
    await conn.set_type_codec(
        "jsonb", schema="pg_catalog", encoder=encode_jsonb, decoder=decode_jsonb, format="binary"
    )
    schema = await conn.fetchval(
        "SELECT typnamespace::regnamespace::text FROM pg_type WHERE typname = 'vector'"
    )
    await conn.set_type_codec(
        "vector", schema=schema, encoder=encode_vector, decoder=decode_vector, format="binary"
    )


def encode_jsonb(value: Any) -> bytes:
    """jsonb's binary form: a version byte (1), then the JSON text."""
    return b"\x01" + orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)


def decode_jsonb(data: bytes) -> Any:
    return orjson.loads(data[1:])


def encode_vector(vector: Any) -> bytes:
    values = np.asarray(vector, dtype=">f4")
    return struct.pack(">HH", values.shape[0], 0) + values.tobytes()


def decode_vector(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=">f4", offset=4).astype(np.float32)
