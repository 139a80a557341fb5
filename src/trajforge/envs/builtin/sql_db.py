"""The sql environment's databases: generated in code from (schema, seed), queried read-only.

Three schemas (``shop``, ``school``, ``library``), each a few hundred rows. A database is built
once per process and kept as serialized bytes; every query opens a fresh in-memory copy that is
read-only three ways: ``PRAGMA query_only``, an authorizer that allows nothing but reading, and a
length limit on values. A progress handler stops a statement that runs past its time limit.
"""

from __future__ import annotations

import random
import sqlite3
import time
from dataclasses import dataclass
from functools import cache
from itertools import product
from typing import Any

from trajforge.envs.tool import ToolError

SCHEMAS = ("shop", "school", "library")
FIRST = ("Ada", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gia", "Hal", "Iris", "Jack", "Kai", "Lena",
         "Milo", "Nora", "Omar", "Pia", "Quin", "Rosa", "Sam", "Tara", "Uma", "Vic", "Wes", "Yara")  # fmt: skip
LAST = ("Adams", "Baker", "Chen", "Diaz", "Evans", "Ford", "Garcia", "Hill", "Ito", "Jones",
        "Khan", "Lopez", "Moore", "Novak", "Ortiz", "Patel", "Reyes", "Smith", "Tran", "Young")  # fmt: skip
CITIES = ("Austin", "Berlin", "Cairo", "Delhi", "Lima", "Oslo", "Paris", "Seoul")
CATEGORIES = ("books", "garden", "kitchen", "music", "sports", "toys")
ADJECTIVES = ("Blue", "Bright", "Clever", "Golden", "Happy", "Quiet", "Rapid", "Silent", "Tiny",
              "Wild", "Brave", "Hidden", "Lucky", "Northern", "Silver", "Velvet")  # fmt: skip
NOUNS = ("Lamp", "Kettle", "River", "Garden", "Tower", "Harbor", "Clock", "Forest", "Engine",
         "Compass", "Mirror", "Lantern", "Meadow", "Bridge", "Falcon", "Island")  # fmt: skip
HOUSES = ("Oak", "Pine", "Birch", "Cedar")
DEPARTMENTS = ("Math", "Science", "History", "Art", "Languages")
SUBJECTS = ("Algebra", "Geometry", "Statistics", "Physics", "Chemistry", "Biology", "Ancient History",
            "Modern History", "Painting", "Sculpture", "French", "Spanish", "Latin", "Calculus",
            "Astronomy")  # fmt: skip
SUBJECT_DEPARTMENT = dict(zip(SUBJECTS, (0, 0, 0, 1, 1, 1, 2, 2, 3, 3, 4, 4, 4, 0, 1), strict=True))
GENRES = ("fantasy", "history", "mystery", "poetry", "romance", "science")
AUTHORS = tuple(f"{first} {last}" for first, last in zip(FIRST[::2], LAST[3:], strict=False))
VARIANTS = 4
MAX_VALUE_BYTES = 1_000_000

DDL = {
    "shop": (
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, "
        "signup_year INTEGER NOT NULL)",
        "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, "
        "price REAL NOT NULL)",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES "
        "customers(id), product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT "
        "NULL, order_date TEXT NOT NULL)",
    ),
    "school": (
        "CREATE TABLE students (id INTEGER PRIMARY KEY, name TEXT NOT NULL, year INTEGER NOT NULL, "
        "house TEXT NOT NULL)",
        "CREATE TABLE courses (id INTEGER PRIMARY KEY, title TEXT NOT NULL, department TEXT NOT "
        "NULL, credits INTEGER NOT NULL)",
        "CREATE TABLE grades (student_id INTEGER NOT NULL REFERENCES students(id), course_id "
        "INTEGER NOT NULL REFERENCES courses(id), score INTEGER NOT NULL, PRIMARY KEY (student_id, "
        "course_id))",
    ),
    "library": (
        "CREATE TABLE books (id INTEGER PRIMARY KEY, title TEXT NOT NULL, author TEXT NOT NULL, "
        "genre TEXT NOT NULL, year INTEGER NOT NULL, pages INTEGER NOT NULL)",
        "CREATE TABLE members (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL)",
        "CREATE TABLE loans (id INTEGER PRIMARY KEY, book_id INTEGER NOT NULL REFERENCES books(id), "
        "member_id INTEGER NOT NULL REFERENCES members(id), loan_date TEXT NOT NULL, returned "
        "INTEGER NOT NULL)",
    ),
}


def _people(rng: random.Random, n: int) -> list[str]:
    return [f"{first} {last}" for first, last in rng.sample(list(product(FIRST, LAST)), n)]


def _date(rng: random.Random, first_year: int, last_year: int) -> str:
    return f"{rng.randint(first_year, last_year)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


def _fill_shop(con: sqlite3.Connection, rng: random.Random) -> None:
    customers = [(i, name, rng.choice(CITIES), rng.randint(2015, 2024))
                 for i, name in enumerate(_people(rng, 80), start=1)]  # fmt: skip
    names = [f"{a} {n}" for a, n in rng.sample(list(product(ADJECTIVES, NOUNS)), 40)]
    prices = [cents / 100 for cents in rng.sample(range(199, 20_000), 40)]
    products = [(i, name, rng.choice(CATEGORIES), prices[i - 1]) for i, name in enumerate(names, 1)]
    orders = [(i, rng.randint(1, 80), rng.randint(1, 40), rng.randint(1, 5), _date(rng, 2021, 2024))
              for i in range(1, 501)]  # fmt: skip
    con.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", customers)
    con.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", products)
    con.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", orders)


def _fill_school(con: sqlite3.Connection, rng: random.Random) -> None:
    students = [(i, name, rng.randint(1, 4), rng.choice(HOUSES))
                for i, name in enumerate(_people(rng, 120), start=1)]  # fmt: skip
    courses = [(i, title, DEPARTMENTS[SUBJECT_DEPARTMENT[title]], rng.randint(1, 6))
               for i, title in enumerate(SUBJECTS, start=1)]  # fmt: skip
    grades = [(sid, cid, rng.randint(35, 100))
              for sid in range(1, 121) for cid in sorted(rng.sample(range(1, 16), rng.randint(3, 6)))]  # fmt: skip
    con.executemany("INSERT INTO students VALUES (?, ?, ?, ?)", students)
    con.executemany("INSERT INTO courses VALUES (?, ?, ?, ?)", courses)
    con.executemany("INSERT INTO grades VALUES (?, ?, ?)", grades)


def _fill_library(con: sqlite3.Connection, rng: random.Random) -> None:
    titles = [f"The {a} {n}" for a, n in rng.sample(list(product(ADJECTIVES, NOUNS)), 150)]
    books = [(i, title, rng.choice(AUTHORS), rng.choice(GENRES), rng.randint(1900, 2023),
              rng.randint(80, 900)) for i, title in enumerate(titles, start=1)]  # fmt: skip
    members = [(i, name, rng.choice(CITIES)) for i, name in enumerate(_people(rng, 60), start=1)]
    loans = [(i, rng.randint(1, 150), rng.randint(1, 60), _date(rng, 2022, 2024),
              int(rng.random() < 0.8)) for i in range(1, 401)]  # fmt: skip
    con.executemany("INSERT INTO books VALUES (?, ?, ?, ?, ?, ?)", books)
    con.executemany("INSERT INTO members VALUES (?, ?, ?)", members)
    con.executemany("INSERT INTO loans VALUES (?, ?, ?, ?, ?)", loans)


_FILL = {"shop": _fill_shop, "school": _fill_school, "library": _fill_library}


@cache
def database_bytes(schema: str, seed: int) -> bytes:
    """The serialized database of ``schema`` generated from ``seed`` (built once per process)."""
    if schema not in DDL:
        raise ToolError(f"unknown database schema {schema!r}; known: {', '.join(SCHEMAS)}")
    con = sqlite3.connect(":memory:")
    try:
        for statement in DDL[schema]:
            con.execute(statement)
        _FILL[schema](con, random.Random(f"sql:{schema}:{seed}"))
        con.commit()
        return con.serialize()
    finally:
        con.close()


_READ_ONLY_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_READ_ONLY_ACTIONS.add(getattr(sqlite3, "SQLITE_RECURSIVE", 33))


def _authorize(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ONLY_ACTIONS else sqlite3.SQLITE_DENY


def open_readonly(schema: str, seed: int) -> sqlite3.Connection:
    """A fresh in-memory copy of the database that refuses every write."""
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.deserialize(database_bytes(schema, seed))
    con.execute("PRAGMA query_only = ON")
    con.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    con.set_authorizer(_authorize)
    return con


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool


def run_query(
    con: sqlite3.Connection, sql: str, *, max_rows: int, time_limit_s: float
) -> QueryResult:
    """Run one read-only statement; at most ``max_rows`` rows are fetched.

    Raises:
        ToolError: the statement writes, fails, or runs longer than ``time_limit_s``.
    """
    if not sql.strip():
        raise ToolError("empty query; give one SELECT statement")
    deadline = time.monotonic() + time_limit_s
    con.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cursor = con.execute(sql)
        rows = cursor.fetchmany(max_rows + 1)
    except sqlite3.Error as exc:
        message = str(exc)
        if "interrupted" in message:
            raise ToolError(
                f"the query ran longer than {time_limit_s:g} s and was stopped"
            ) from None
        if "not authorized" in message or "readonly" in message or "read-only" in message:
            raise ToolError(
                "refused: the database is read-only; only SELECT queries are allowed"
            ) from None
        raise ToolError(f"SQL error: {message}") from None
    finally:
        con.set_progress_handler(None, 0)
    columns = [d[0] for d in cursor.description] if cursor.description else []
    return QueryResult(columns=columns, rows=rows[:max_rows], truncated=len(rows) > max_rows)


def table_names(con: sqlite3.Connection) -> list[str]:
    rows = con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [r[0] for r in rows]
