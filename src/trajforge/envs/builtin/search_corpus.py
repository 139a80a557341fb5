"""The search environment's corpus: fictional countries, cities, people and companies.

Generated deterministically in code (the same documents in every process and version), so that
a model cannot answer from memory and must search. Every fact sits in exactly one document.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

ONSETS = (
    "b",
    "d",
    "f",
    "g",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "z",
    "br",
    "dr",
    "gl",
    "kr",
    "st",
    "th",
)
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io")
CODAS = ("", "", "n", "r", "l", "s", "th", "nd", "rk")
PROFESSIONS = (
    "chemist",
    "painter",
    "engineer",
    "pilot",
    "architect",
    "botanist",
    "composer",
    "surgeon",
    "geologist",
    "novelist",
)
INDUSTRIES = (
    "robotics",
    "shipping",
    "textile",
    "software",
    "mining",
    "brewing",
    "aerospace",
    "furniture",
)
SUFFIXES = ("Labs", "Works", "Systems", "Group", "Industries", "Company", "Dynamics", "Partners")
PRODUCTS = ("glassware", "salt", "violins", "wool", "clocks", "ceramics", "maps", "tea")

N_COUNTRIES = 8
N_CITIES = 40
N_PEOPLE = 180
N_COMPANIES = 180


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True)
class Company:
    name: str
    doc_id: str
    founder: str
    founder_doc: str
    city: str
    city_doc: str


@dataclass
class Corpus:
    """The documents, the companies questions are asked about, and each company's answers."""

    documents: list[Document]
    companies: list[Company]
    facts: dict[str, dict[str, str]]
    by_id: dict[str, Document] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_id = {d.doc_id: d for d in self.documents}


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _article(noun: str) -> str:
    return "an" if noun[0] in "aeiou" else "a"


def _word(rng: random.Random, syllables: int) -> str:
    parts = [rng.choice(ONSETS) + rng.choice(VOWELS) for _ in range(syllables)]
    return ("".join(parts) + rng.choice(CODAS)).capitalize()


def _unique(
    rng: random.Random, n: int, make: Callable[[random.Random], str], taken: set[str]
) -> list[str]:
    names: list[str] = []
    while len(names) < n:
        name = make(rng)
        if name not in taken:
            taken.add(name)
            names.append(name)
    return names


@cache
def build_corpus(seed: int = 1234) -> Corpus:
    """The corpus for ``seed`` (the environment uses the default)."""
    rng = random.Random(seed)
    taken: set[str] = set()
    countries = _unique(rng, N_COUNTRIES, lambda r: _word(r, 2) + "ia", taken)
    cities = _unique(rng, N_CITIES, lambda r: _word(r, r.randint(2, 3)), taken)
    people = _unique(rng, N_PEOPLE, lambda r: f"{_word(r, 2)} {_word(r, r.randint(1, 2))}", taken)
    companies = _unique(rng, N_COMPANIES, lambda r: f"{_word(r, 3)} {r.choice(SUFFIXES)}", taken)
    docs: list[Document] = []
    facts: dict[str, dict[str, str]] = {}
    city_country: dict[str, str] = {}
    for country in countries:
        docs.append(
            Document(slug(country), country, f"{country} is a country with a long coastline.")
        )
    for city in cities:
        country = rng.choice(countries)
        city_country[city] = country
        product = rng.choice(PRODUCTS)
        text = f"{city} is a city in the country of {country}. It is known for its {product}."
        docs.append(Document(slug(city), city, text))
    person_facts: dict[str, dict[str, str]] = {}
    for person in people:
        city, job, year = rng.choice(cities), rng.choice(PROFESSIONS), rng.randint(1920, 1990)
        person_facts[person] = {"city": city, "profession": job}
        text = (
            f"{person} is {_article(job)} {job}. {person} was born in {year} in the city of {city}."
        )
        docs.append(Document(slug(person), person, text))
    entries: list[Company] = []
    for company in companies:
        founder, city = rng.choice(people), rng.choice(cities)
        industry, year = rng.choice(INDUSTRIES), rng.randint(1950, 2020)
        text = (
            f"{company} is {_article(industry)} {industry} business with a long history of growth. "
            f"It was founded in {year} by {founder} and has its headquarters in {city}."
        )
        docs.append(Document(slug(company), company, text))
        entries.append(Company(company, slug(company), founder, slug(founder), city, slug(city)))
        facts[company] = {
            "founder_city": person_facts[founder]["city"],
            "founder_profession": person_facts[founder]["profession"],
            "hq_country": city_country[city],
        }
    return Corpus(documents=docs, companies=entries, facts=facts)
