"""sql blueprints: a question over one table filtered on a column's value, and its gold actions.

The proposer picks a database, a table, a column to filter on and a value of it, and a question
kind (count the rows, average or maximum of a column, list a column), in words from a template.
Like a task writer who misremembers the schema, it draws the filter column from every table of
the database, not only the one asked about, and the column to aggregate without regard to its
type. The gold actions are the expert's (list the tables, describe the table, run the query);
once they ran, the answer is the query's full result (a query that finds nothing is no task).
"""

from __future__ import annotations

import random
from typing import Any

from trajforge.envs.builtin.sql_db import SCHEMAS, VARIANTS, open_readonly, table_names
from trajforge.envs.builtin.sql_env import gold_rows
from trajforge.envs.synthesizers.base import Action, Blueprint, content_id
from trajforge.schema import Task

ENV = "sql"
KINDS = ("count", "average", "maximum", "list")
KEEPS_TABLE = 0.75


def _columns(schema: str, seed: int) -> dict[str, list[str]]:
    con = open_readonly(schema, seed)
    try:
        # PRAGMA is refused on a read-only connection; an empty SELECT names the columns.
        return {
            t: [d[0] for d in con.execute(f'SELECT * FROM "{t}" LIMIT 0').description]
            for t in table_names(con)
        }
    finally:
        con.close()


def _values(schema: str, seed: int, table: str, column: str) -> list[Any]:
    con = open_readonly(schema, seed)
    try:
        rows = con.execute(f'SELECT DISTINCT "{column}" FROM "{table}" ORDER BY 1 LIMIT 50')
        return [r[0] for r in rows]
    finally:
        con.close()


def _literal(value: Any) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else str(value)


def propose(rng: random.Random) -> Blueprint:
    """One sql blueprint (see the module's docstring)."""
    schema, seed = rng.choice(SCHEMAS), rng.randrange(VARIANTS)
    columns = _columns(schema, seed)
    table = rng.choice(sorted(columns))
    # The filter column's table: mostly the one asked about, now and then another.
    owner = table if rng.random() < KEEPS_TABLE else rng.choice(sorted(columns))
    column = rng.choice([c for c in columns[owner] if c != "id"])
    value = rng.choice(_values(schema, seed, owner, column))
    target = rng.choice([c for c in columns[table] if c != "id"])
    kind = rng.choice(KINDS)
    where = f'WHERE "{column}" = {_literal(value)}'
    shown = repr(value) if isinstance(value, str) else value
    question, sql = {
        "count": (f"How many rows of the {table} table have {column} equal to {shown}?",
                  f'SELECT COUNT(*) FROM "{table}" {where}'),
        "average": (f"What is the average {target} of the {table} rows whose {column} is {shown}?",
                    f'SELECT AVG("{target}") FROM "{table}" {where}'),
        "maximum": (f"What is the largest {target} among the {table} rows whose {column} is {shown}?",
                    f'SELECT MAX("{target}") FROM "{table}" {where}'),
        "list": (f"List the {target} of every {table} row whose {column} is {shown}.",
                 f'SELECT "{target}" FROM "{table}" {where}'),
    }[kind]  # fmt: skip
    prompt = (
        f"{question}\n\n(The database is a {schema} database. Give your final answer as one SQL "
        "query in a ```sql block.)"
    )
    data = {"schema": schema, "db_seed": seed, "gold_sql": sql, "tables": [table], "ordered": False}
    draft = Task(id="draft", prompt=prompt, env=ENV, data=data, split="train")
    task = draft.model_copy(update={"id": content_id(ENV, draft)})
    actions: tuple[Action, ...] = (
        ("list_tables", {}),
        ("describe", {"table": table}),
        ("query", {"sql": sql}),
    )
    return Blueprint(task, actions, settle)


def settle(task: Task) -> Task | str:
    """The task with the gold query's full result as its answer; none when it finds nothing
    (no row, NULL or 0: a question whose filter matches nothing)."""
    rows = gold_rows(task.data["schema"], int(task.data["db_seed"]), task.data["gold_sql"])
    if not rows or rows[0][0] in (None, 0):
        return "the gold query finds nothing"
    return task.model_copy(update={"answer": rows})
