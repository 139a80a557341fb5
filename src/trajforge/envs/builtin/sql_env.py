"""sql: questions over generated SQLite databases, with list_tables, describe and query tools.

Answer convention: the final reply gives the answer as ONE SQL query in a fenced ```sql block
(the last such block counts). The verifier runs it on the task's database and compares its result
set with the gold query's: rows in any order unless the question asks for an order, numbers
equal within a relative tolerance of 1e-6, column names ignored. The expert lists the tables,
describes those the gold query uses, runs the gold query, then answers with it.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from trajforge.envs.builtin.plan import PlannedCall, follow_plan
from trajforge.envs.builtin.sql_db import (
    CATEGORIES,
    CITIES,
    DEPARTMENTS,
    GENRES,
    SCHEMAS,
    SUBJECTS,
    VARIANTS,
    open_readonly,
    run_query,
    table_names,
)
from trajforge.envs.taskset import TRAIN, generate_unique
from trajforge.envs.tool import ToolContext, ToolError, tool
from trajforge.envs.tool_env import ToolEnv
from trajforge.schema import Evidence, Message, Task

NAME = "sql"
DESCRIPTION = "Questions over generated SQLite databases; list_tables, describe, read-only query."
SYSTEM_PROMPT = (
    "Answer the question about the database using the tools list_tables, describe and query "
    "(read-only SQLite). When done, give the answer as one SQL query in a ```sql block whose "
    "result is the answer."
)
MAX_ROWS = 50
QUERY_TIME_LIMIT_S = 2.0
VERIFY_MAX_ROWS = 10_000
REL_TOL = 1e-6

# (question, gold SQL, tables the gold SQL reads, whether the question asks for an order)
Question = tuple[str, str, tuple[str, ...], bool]


def _shop(rng: random.Random) -> Question:
    city, cat, k = rng.choice(CITIES), rng.choice(CATEGORIES), rng.randint(3, 6)
    year, n = rng.randint(2021, 2024), rng.randint(2, 4)
    options: list[Question] = [
        (f"How many customers live in {city}?",
         f"SELECT COUNT(*) FROM customers WHERE city = '{city}'", ("customers",), False),
        (f"What is the total revenue (quantity times price) of all orders of products in the "
         f"'{cat}' category?",
         "SELECT SUM(o.quantity * p.price) FROM orders o JOIN products p ON p.id = o.product_id "
         f"WHERE p.category = '{cat}'", ("orders", "products"), False),
        (f"List the names of the {k} most expensive products, most expensive first.",
         f"SELECT name FROM products ORDER BY price DESC LIMIT {k}", ("products",), True),
        (f"Which customers from {city} placed at least {n} orders? List their names.",
         "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
         f"WHERE c.city = '{city}' GROUP BY c.id HAVING COUNT(*) >= {n}",
         ("customers", "orders"), False),
        (f"What is the average price of the products in the '{cat}' category?",
         f"SELECT AVG(price) FROM products WHERE category = '{cat}'", ("products",), False),
        (f"How many orders were placed in {year}?",
         f"SELECT COUNT(*) FROM orders WHERE order_date LIKE '{year}-%'", ("orders",), False),
        ("For each city, how many customers live there? Give the city and the count.",
         "SELECT city, COUNT(*) FROM customers GROUP BY city", ("customers",), False),
    ]  # fmt: skip
    return rng.choice(options)


def _school(rng: random.Random) -> Question:
    year, title, dept = rng.randint(1, 4), rng.choice(SUBJECTS), rng.choice(DEPARTMENTS)
    score, k = rng.randint(70, 95), rng.randint(3, 5)
    options: list[Question] = [
        (f"How many students are in year {year}?",
         f"SELECT COUNT(*) FROM students WHERE year = {year}", ("students",), False),
        (f"What is the average score in the course '{title}'?",
         "SELECT AVG(g.score) FROM grades g JOIN courses c ON c.id = g.course_id "
         f"WHERE c.title = '{title}'", ("grades", "courses"), False),
        (f"Which students scored {score} or more in '{title}'? List their names.",
         "SELECT s.name FROM students s JOIN grades g ON g.student_id = s.id JOIN courses c ON "
         f"c.id = g.course_id WHERE c.title = '{title}' AND g.score >= {score}",
         ("students", "grades", "courses"), False),
        (f"List the names of the {k} students with the highest average score, highest first "
         "(break ties by name, A to Z).",
         "SELECT s.name FROM students s JOIN grades g ON g.student_id = s.id GROUP BY s.id "
         f"ORDER BY AVG(g.score) DESC, s.name LIMIT {k}", ("students", "grades"), True),
        (f"How many credits do the courses of the {dept} department carry in total?",
         f"SELECT SUM(credits) FROM courses WHERE department = '{dept}'", ("courses",), False),
        ("For each house, what is the average score of its students' grades? Give the house "
         "and the average.",
         "SELECT s.house, AVG(g.score) FROM students s JOIN grades g ON g.student_id = s.id "
         "GROUP BY s.house", ("students", "grades"), False),
    ]  # fmt: skip
    return rng.choice(options)


def _library(rng: random.Random) -> Question:
    genre, city, year = rng.choice(GENRES), rng.choice(CITIES), rng.randint(1905, 1930)
    author_sql = "SELECT author FROM books GROUP BY author ORDER BY COUNT(*) DESC, author LIMIT 1"
    options: list[Question] = [
        (f"How many books in the '{genre}' genre does the library have?",
         f"SELECT COUNT(*) FROM books WHERE genre = '{genre}'", ("books",), False),
        (f"Which members from {city} have a loan that has not been returned? List each name once.",
         "SELECT DISTINCT m.name FROM members m JOIN loans l ON l.member_id = m.id "
         f"WHERE m.city = '{city}' AND l.returned = 0", ("members", "loans"), False),
        (f"What is the title of the longest book (most pages) in the '{genre}' genre? Break ties "
         "by title, A to Z.",
         f"SELECT title FROM books WHERE genre = '{genre}' ORDER BY pages DESC, title LIMIT 1",
         ("books",), False),
        (f"How many loans were made of books in the '{genre}' genre?",
         "SELECT COUNT(*) FROM loans l JOIN books b ON b.id = l.book_id "
         f"WHERE b.genre = '{genre}'", ("loans", "books"), False),
        (f"List the titles of the books published before {year}, oldest first (break ties by "
         "title, A to Z).",
         f"SELECT title FROM books WHERE year < {year} ORDER BY year, title", ("books",), True),
        ("Which author has the most books in the library? Break ties by name, A to Z.",
         author_sql, ("books",), False),
    ]  # fmt: skip
    return rng.choice(options)


QUESTIONS: dict[str, Callable[[random.Random], Question]] = {
    "shop": _shop,
    "school": _school,
    "library": _library,
}


def gold_rows(schema: str, seed: int, sql: str) -> list[list[Any]]:
    """The full result of ``sql`` on a task's database, as JSON-ready lists."""
    con = open_readonly(schema, seed)
    try:
        result = run_query(con, sql, max_rows=VERIFY_MAX_ROWS, time_limit_s=QUERY_TIME_LIMIT_S)
    finally:
        con.close()
    return [list(row) for row in result.rows]


def _make_one(rng: random.Random) -> Task:
    while True:
        schema, seed = rng.choice(SCHEMAS), rng.randrange(VARIANTS)
        question, sql, tables, ordered = QUESTIONS[schema](rng)
        rows = gold_rows(schema, seed, sql)
        if rows and rows[0][0] is not None:
            break
    prompt = (
        f"{question}\n\n(The database is a {schema} database. Give your final answer as one SQL "
        "query in a ```sql block.)"
    )
    data = {"schema": schema, "db_seed": seed, "gold_sql": sql, "tables": list(tables)}
    data["ordered"] = ordered
    return Task(id="draft", prompt=prompt, answer=rows, data=data)


def generate_tasks(n: int, seed: int = 0, split: str = TRAIN) -> list[Task]:
    """``n`` distinct questions; train and test never share one."""
    return generate_unique(NAME, _make_one, n, seed, split)


def _connect(context: ToolContext) -> Any:
    return open_readonly(context.task.data["schema"], int(context.task.data["db_seed"]))


@tool
def list_tables(context: ToolContext) -> str:
    """List the tables of the database."""
    con = _connect(context)
    try:
        return "\n".join(table_names(con))
    finally:
        con.close()


@tool
def describe(table: str, context: ToolContext) -> str:
    """Show a table's columns (its CREATE statement), its row count and three sample rows.

    Args:
        table: The table's name, as list_tables gives it.
    """
    con = _connect(context)
    try:
        names = table_names(con)
        if table not in names:
            raise ToolError(f"no table named {table!r}; the tables are: {', '.join(names)}")
        (ddl,) = con.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        (count,) = con.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
        sample = run_query(con, f'SELECT * FROM "{table}" LIMIT 3', max_rows=3, time_limit_s=1.0)
        return f"{ddl}\n{count} rows. First rows:\n{_format_rows(sample.columns, sample.rows)}"
    finally:
        con.close()


@tool
def query(sql: str, context: ToolContext) -> str:
    """Run one read-only SQL statement (SQLite) and return its rows (at most 50).

    Args:
        sql: One SELECT statement.
    """
    con = _connect(context)
    try:
        result = run_query(con, sql, max_rows=MAX_ROWS, time_limit_s=QUERY_TIME_LIMIT_S)
    finally:
        con.close()
    if not result.columns:
        return "(the statement returned no result set)"
    text = _format_rows(result.columns, result.rows)
    more = f"\n(only the first {MAX_ROWS} rows are shown)" if result.truncated else ""
    return f"{text}\n({len(result.rows)} row{'s' * (len(result.rows) != 1)}){more}"


def _format_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = [" | ".join(columns)]
    lines += [" | ".join("NULL" if v is None else str(v) for v in row) for row in rows]
    return "\n".join(lines)


_SQL_BLOCK = re.compile(r"```sql\s*\n?(.*?)```", re.S | re.I)


def answer_query(text: str) -> str | None:
    """The SQL of the last ```sql block in ``text`` (None when there is none)."""
    blocks = [b.strip() for b in _SQL_BLOCK.findall(text)]
    return blocks[-1] if blocks and blocks[-1] else None


def _same_value(a: Any, b: Any) -> bool:
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=REL_TOL)
    return bool(a == b)


def _sort_key(row: Sequence[Any]) -> tuple[tuple[int, Any], ...]:
    return tuple(
        (0, 0)
        if v is None
        else (1, round(float(v), 6))
        if isinstance(v, int | float)
        else (2, str(v))
        for v in row
    )


def same_result(got: Sequence[Sequence[Any]], gold: Sequence[Sequence[Any]], ordered: bool) -> bool:
    """Result sets equal: same rows (in order only when ``ordered``), numbers within tolerance."""
    if len(got) != len(gold):
        return False
    if not ordered:
        got, gold = sorted(got, key=_sort_key), sorted(gold, key=_sort_key)
    return all(
        len(g) == len(w) and all(_same_value(x, y) for x, y in zip(g, w, strict=True))
        for g, w in zip(got, gold, strict=True)
    )


def verify(evidence: Evidence) -> float:
    """1.0 when the final ```sql block returns the gold result set on the task's database."""
    task = evidence.task
    sql = answer_query(evidence.answer or "")
    if sql is None:
        return 0.0
    try:
        rows = gold_rows(task.data["schema"], int(task.data["db_seed"]), sql)
    except ToolError:
        return 0.0
    return 1.0 if same_result(rows, task.answer, bool(task.data.get("ordered"))) else 0.0


def expert(task: Task, messages: list[Message]) -> str | None:
    """list_tables, describe each table the gold query reads, run the gold query, answer with it."""
    sql = task.data["gold_sql"]
    plan: list[PlannedCall] = [
        ("list_tables", {}),
        *(("describe", {"table": t}) for t in task.data["tables"]),
        ("query", {"sql": sql}),
    ]
    return follow_plan(
        plan, messages, f"The answer is the result of this query:\n```sql\n{sql}\n```"
    )


def make_env(**kwargs: Any) -> ToolEnv:
    options: dict[str, Any] = {"max_turns": 10, "system_prompt": SYSTEM_PROMPT}
    options.update(kwargs)
    return ToolEnv(
        [list_tables, describe, query],
        verifier=verify,
        name=NAME,
        description=DESCRIPTION,
        expert=expert,
        **options,
    )
