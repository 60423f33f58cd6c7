"""The queries: a panorama cue x a term of one of the scene categories, per language, from a YAML
table, plus what an optional expander plugin proposes. Each query remembers its category and language."""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import yaml
from pydantic import Field, ValidationError

from vsi_wild.errors import UnitError
from vsi_wild.stages.crawl.params import SCENE_CATEGORIES, SearchParams, StrictModel, resolve_path


@dataclasses.dataclass(frozen=True)
class Query:
    text: str
    category: str
    language: str
    cue: str = ""
    term: str = ""
    origin: str = "table"  # "table" or "expander:<name>"


class LanguageQueries(StrictModel):
    template: str = Field("{cue} {term}", description="how a cue and a category term make a query")
    cues: list[str]
    categories: dict[str, list[str]] = Field(description="scene category (English name) -> terms in this language")


class QueryTable(StrictModel):
    languages: dict[str, LanguageQueries]


class QueryTableError(UnitError):
    def __init__(self, message: str):
        super().__init__(message, kind="bad_input", retryable=False)


def load_query_table(path: str | os.PathLike[str]) -> QueryTable:
    p = resolve_path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise QueryTableError(f"query table not found: {p} (crawl.search.queries_file)") from None
    except yaml.YAMLError as e:
        raise QueryTableError(f"{p}: not valid YAML: {e}") from None
    try:
        table = QueryTable.model_validate(data)
    except ValidationError as e:
        where = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise QueryTableError(f"{p}: {where}") from None
    for lang, lq in table.languages.items():
        bad = [c for c in lq.categories if c not in SCENE_CATEGORIES]
        if bad:
            raise QueryTableError(
                f"{p}: languages.{lang}.categories: unknown categories {bad}; "
                f"expected the benchmark's names {list(SCENE_CATEGORIES)}"
            )
        if "{cue}" not in lq.template or "{term}" not in lq.template:
            raise QueryTableError(f"{p}: languages.{lang}.template must contain {{cue}} and {{term}}")
    return table


def _norm_query(text: str) -> str:
    return " ".join(text.casefold().split())


def build_queries(table: QueryTable, params: SearchParams) -> list[Query]:
    """Cue x category term per language, in a stable order, without duplicates."""
    langs = list(table.languages) if params.languages == ["*"] else params.languages
    missing = [lang for lang in langs if lang not in table.languages]
    if missing:
        raise QueryTableError(f"languages {missing} are not in the query table (has {sorted(table.languages)})")
    out: list[Query] = []
    seen: set[str] = set()
    for lang in langs:
        lq = table.languages[lang]
        cues = [c for c in lq.cues if params.cues is None or c in params.cues]
        for category in params.categories:
            for term in lq.categories.get(category, []):
                for cue in cues:
                    text = " ".join(lq.template.format(cue=cue, term=term).split())
                    if _norm_query(text) in seen:
                        continue
                    seen.add(_norm_query(text))
                    out.append(Query(text, category, lang, cue, term, "table"))
    return out


@runtime_checkable
class QueryExpander(Protocol):
    """A plugin that proposes more queries (variants, other languages) from the table's queries.

    It returns new ``Query`` objects (or dicts with ``text``, ``category``, ``language``); each must
    keep a scene category and a language. Nothing calls a network model unless configured.
    """

    name: str

    def expand(self, queries: Sequence[Query]) -> Iterable[Query | Mapping[str, Any]]: ...


def load_expander(spec: str, options: Mapping[str, Any] | None = None) -> QueryExpander:
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise QueryTableError(f"crawl.search.expander {spec!r}: expected 'module:factory'")
    try:
        factory = getattr(importlib.import_module(mod_name), attr)
    except (ImportError, AttributeError) as e:
        raise QueryTableError(f"crawl.search.expander {spec!r} cannot be loaded: {e}") from None
    expander = factory(**dict(options or {}))
    if not isinstance(expander, QueryExpander):
        raise QueryTableError(f"crawl.search.expander {spec!r} does not provide name and expand(queries)")
    return expander


def expand_queries(
    queries: Sequence[Query], expander: QueryExpander | None, max_queries: int | None = None
) -> list[Query]:
    out = list(queries)
    if expander is not None:
        seen = {_norm_query(q.text) for q in out}
        for i, item in enumerate(expander.expand(list(queries))):
            if isinstance(item, Mapping):
                item = Query(str(item.get("text", "")), str(item.get("category", "")), str(item.get("language", "")))
            if not item.text.strip() or item.category not in SCENE_CATEGORIES or not item.language:
                raise QueryTableError(
                    f"expander {expander.name!r} result {i}: needs a text, a language and one of the scene "
                    f"categories, got {item!r}"
                )
            if _norm_query(item.text) in seen:
                continue
            seen.add(_norm_query(item.text))
            out.append(dataclasses.replace(item, text=" ".join(item.text.split()), origin=f"expander:{expander.name}"))
    return out[:max_queries] if max_queries else out


def queries_for(params: SearchParams) -> list[Query]:
    table = load_query_table(params.queries_file)
    expander = load_expander(params.expander, params.expander_options) if params.expander else None
    return expand_queries(build_queries(table, params), expander, params.max_queries)
