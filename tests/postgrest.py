"""A PostgREST stand-in for respx: supabase-py's requests run on a real Postgres.

RPCs are executed the way PostgREST executes them (the JSON body becomes the
function's typed arguments through `json_to_record`, the result is `json_agg` of its
rows); table reads and deletes translate PostgREST's filter syntax into SQL. Errors
have PostgREST's shape and status codes, and requests without the service role key
are refused as Supabase's gateway refuses them. Queued `faults` are answered first,
to test 5xx answers, timeouts and dropped connections.
"""

from __future__ import annotations

import re
from typing import Any

import asyncpg
import httpx
import orjson

IDENTIFIER = re.compile(r"^[a-z_][a-z0-9_]*$")
OPERATORS = {
    "eq": "=",
    "gt": ">",
    "gte": ">=",
    "lt": "<",
    "lte": "<=",
    "neq": "<>",
    "ilike": "ILIKE",
}


class PostgREST:
    def __init__(self, dsn: str, key: str) -> None:
        self.dsn = dsn
        self.key = key
        self.faults: list[httpx.Response | Exception] = []
        self.requests: list[httpx.Request] = []

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.faults:
            fault = self.faults.pop(0)
            if isinstance(fault, Exception):
                raise fault
            return fault
        if request.headers.get("apikey") != self.key:
            return reply(401, {"message": "Invalid API key"})
        path = request.url.path.removeprefix("/rest/v1/")
        conn = await asyncpg.connect(self.dsn)  # one per request: no pool outlives a test
        try:
            if path.startswith("rpc/") and request.method == "POST":
                body = orjson.loads(request.content or b"{}")
                return await self.rpc(conn, path.removeprefix("rpc/"), body)
            if request.method == "GET":
                return await self.read(conn, path, request.url.params)
            if request.method == "DELETE":
                return await self.delete(conn, path, request.url.params, request.headers)
        except asyncpg.PostgresError as e:
            return sql_error(e)
        finally:
            await conn.close()
        return reply(
            405, {"code": "PGRST117", "message": f"Unsupported HTTP method: {request.method}"}
        )

    async def rpc(
        self, conn: asyncpg.Connection, name: str, body: dict[str, Any]
    ) -> httpx.Response:
        proc = await conn.fetchrow(
            """SELECT p.proargnames[1:p.pronargs] AS names,
                      array(SELECT format_type(t, NULL) FROM unnest(p.proargtypes) t) AS types
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = 'public' AND p.proname = $1""",
            name,
        )
        if proc is None or set(body) - set(proc["names"] or ()):
            return reply(
                404,
                {
                    "code": "PGRST202",
                    "details": None,
                    "hint": None,
                    "message": f"Could not find the function public.{name}"
                    f"({', '.join(sorted(body))}) in the schema cache",
                },
            )
        args = [
            (n, t) for n, t in zip(proc["names"] or (), proc["types"], strict=True) if n in body
        ]
        if args:
            record = ", ".join(f'"{n}" {t}' for n, t in args)
            call = ", ".join(f'"{n}" := a."{n}"' for n, _ in args)
            sql = (
                f"SELECT coalesce(json_agg(r), '[]')::text "
                f"FROM json_to_record($1::json) AS a({record}), LATERAL {name}({call}) AS r"
            )
            return await json_rows(conn, sql, orjson.dumps(body).decode())
        return await json_rows(conn, f"SELECT coalesce(json_agg(r), '[]')::text FROM {name}() r")

    async def read(
        self, conn: asyncpg.Connection, table: str, params: httpx.QueryParams
    ) -> httpx.Response:
        types = await table_columns(conn, table)
        if not types:
            return missing_table(table)
        columns = params.get("select", "*")
        if columns != "*" and not all(c in types for c in columns.split(",")):
            return reply(400, {"code": "42703", "message": f"unknown column in {columns!r}"})
        where, args = where_clause(params, types)
        sql = f'SELECT {columns} FROM "{table}"{where}'
        if "order" in params:
            sql += " ORDER BY " + ", ".join(
                order_term(t, types) for t in params["order"].split(",")
            )
        if "limit" in params:
            sql += f" LIMIT {int(params['limit'])}"
        if "offset" in params:
            sql += f" OFFSET {int(params['offset'])}"
        return await json_rows(
            conn, f"SELECT coalesce(json_agg(r), '[]')::text FROM ({sql}) r", *args
        )

    async def delete(
        self,
        conn: asyncpg.Connection,
        table: str,
        params: httpx.QueryParams,
        headers: httpx.Headers,
    ) -> httpx.Response:
        types = await table_columns(conn, table)
        if not types:
            return missing_table(table)
        where, args = where_clause(params, types)
        deleted = await json_rows(
            conn,
            f'WITH r AS (DELETE FROM "{table}"{where} RETURNING *) '
            "SELECT coalesce(json_agg(r), '[]')::text FROM r",
            *args,
        )
        if "return=representation" not in headers.get("Prefer", ""):
            return httpx.Response(204)
        return deleted


async def json_rows(conn: asyncpg.Connection, sql: str, *args: Any) -> httpx.Response:
    """The answer to a query that returns its rows as one JSON array."""
    text = await conn.fetchval(sql, *args)
    return httpx.Response(200, content=text, headers={"Content-Type": "application/json"})


async def table_columns(conn: asyncpg.Connection, table: str) -> dict[str, str]:
    """Column name -> SQL type of a public table (empty when there is none)."""
    rows = await conn.fetch(
        """SELECT a.attname, format_type(a.atttypid, a.atttypmod) AS type
           FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = 'public' AND c.relname = $1 AND c.relkind = 'r'
             AND a.attnum > 0 AND NOT a.attisdropped""",
        table,
    )
    return {r["attname"]: r["type"] for r in rows}


def where_clause(params: httpx.QueryParams, types: dict[str, str]) -> tuple[str, list[Any]]:
    clauses: list[str] = []
    args: list[Any] = []
    for column, condition in params.multi_items():
        if column in ("select", "order", "limit", "offset"):
            continue
        if column not in types:
            raise asyncpg.exceptions.UndefinedColumnError(f"column {column} does not exist")
        op, _, value = condition.partition(".")
        kind = types[column].removesuffix("[]")
        if op == "is" and value == "null":
            clauses.append(f'"{column}" IS NULL')
        elif op == "in":
            args.append(in_values(value))
            clauses.append(f'"{column}" = ANY(CAST(${len(args)}::text[] AS {kind}[]))')
        elif op in OPERATORS:
            args.append(value)
            clauses.append(f'"{column}" {OPERATORS[op]} CAST(${len(args)}::text AS {kind})')
        else:
            raise asyncpg.exceptions.SyntaxOrAccessError(f"unknown operator {op!r}")
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), args


def in_values(value: str) -> list[str]:
    """The items of PostgREST's `in.(a,"b,c")` list."""
    items, current, quoted, escaped = [], "", False, False
    for char in value.removeprefix("(").removesuffix(")"):
        if escaped:
            current, escaped = current + char, False
        elif char == "\\" and quoted:
            escaped = True
        elif char == '"':
            quoted = not quoted
        elif char == "," and not quoted:
            items.append(current)
            current = ""
        else:
            current += char
    return [*items, current] if value.strip("()") else []


def order_term(term: str, types: dict[str, str]) -> str:
    column, _, direction = term.partition(".")
    if column not in types or direction not in ("", "asc", "desc"):
        raise asyncpg.exceptions.SyntaxOrAccessError(f"cannot order by {term!r}")
    return f'"{column}" {direction.upper()}'


def reply(status: int, body: dict[str, Any]) -> httpx.Response:
    return httpx.Response(status, json=body)


def missing_table(table: str) -> httpx.Response:
    return reply(
        404,
        {
            "code": "PGRST205",
            "details": None,
            "hint": None,
            "message": f"Could not find the table 'public.{table}' in the schema cache",
        },
    )


def sql_error(error: asyncpg.PostgresError) -> httpx.Response:
    """PostgREST's answer to a failed statement: its status table, its error body."""
    code = error.sqlstate or "XX000"
    if code in ("42883", "42P01"):
        status = 404
    elif code == "42501":
        status = 403
    elif code in ("23503", "23505"):
        status = 409
    elif code[:2] in ("08", "53"):
        status = 503
    elif code[:2] in ("09", "25", "2D", "38", "39", "3B", "40", "54", "55", "57", "58", "XX"):
        status = 500
    else:
        status = 400
    body = {
        "code": code,
        "message": str(error),
        "details": getattr(error, "detail", None),
        "hint": getattr(error, "hint", None),
    }
    return reply(status, body)
