"""The question's columns are declared once (schema.QUESTION_COLUMNS): the question table, the export,
``Question``, the export's own columns and the identity fields all come from it, and a column
declared once reaches every one of them."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from vsi_wild import schema
from vsi_wild.stages import export
from vsi_wild.stages.qa import common, registry


def test_every_form_is_the_declaration():
    declared = schema.QUESTION_COLUMNS
    assert schema.QA_QUESTIONS.names == [c.name for c in declared if c.in_questions]
    assert schema.QA_EXPORT.names[: len(schema.QA_EXPORT_HEAD)] == list(schema.QA_EXPORT_HEAD)
    assert sorted(schema.QA_EXPORT.names) == sorted(c.name for c in declared if c.in_export)
    fields = {f.name: f for f in dataclasses.fields(common.Question)}
    assert set(fields) == set(schema.QA_QUESTIONS.names)
    for col in schema.QA_QUESTIONS:  # a nullable column is an optional field, a required one has no default
        assert (fields[col.name].default is None) == col.nullable, col.name
    by_role = {role: {c.name for c in declared if c.in_export and c.role == role} for role in ("base", "task")}
    assert set(registry.EXPORT_BASE_COLUMNS) == by_role["base"] and set(registry.TASK_COLUMNS) == by_role["task"]
    assert set().union(*by_role.values()) == set(schema.QA_EXPORT.names)
    for t in registry.tasks():  # what the tasks fill is declared a task column
        assert set(t.export_columns) <= by_role["task"], t.name
    assert schema.identity_fields() == ("video_id", "task_type", "subtype", "item", "query_times")


def test_a_column_declared_once_reaches_every_form(monkeypatch):
    """A new column (as issues 30 and 31 added) is one entry: both tables, the dataclass, the export row."""
    new = schema.QuestionColumn("example_flag", pa.bool_(), True, doc="rests on an unreviewed decision")
    at = [c.name for c in schema.QUESTION_COLUMNS].index("seed")
    cols = (*schema.QUESTION_COLUMNS[:at], new, *schema.QUESTION_COLUMNS[at:])
    questions, exported = schema._questions_schema(cols), schema._export_schema(cols)
    assert questions.names.index("example_flag") == questions.names.index("seed") - 1
    assert exported.names.index("example_flag") == exported.names.index("seed") - 1
    assert exported.field("example_flag").type == pa.bool_() and exported.field("example_flag").nullable
    Q = dataclasses.make_dataclass("Q", common._question_fields(cols))
    assert "example_flag" in {f.name for f in dataclasses.fields(Q)}
    # the export copies a base column both tables have from the question row
    monkeypatch.setattr(schema, "QUESTION_COLUMNS", cols)
    monkeypatch.setattr(schema, "QA_EXPORT", exported)
    monkeypatch.setattr(export, "_COPIED", (*export._COPIED, "example_flag"))
    q = {c.name: None for c in cols if c.in_questions} | {"task_type": "VOC", "_n": 0, "example_flag": True}
    made = {c: None for c in export._MADE}
    assert export._export_row(q, **made)["example_flag"] is True
    with pytest.raises(KeyError, match="not made"):
        export._export_row(q, **{k: v for k, v in made.items() if k != "answer"})


def test_a_task_cannot_fill_a_column_it_does_not_declare():
    vmr = registry.task("VMR")
    bad = dataclasses.replace(vmr, name="BAD", order=99, release_rank=99, export_columns=registry.copied("seed"))
    with pytest.raises(ValueError, match="not task columns"):
        registry.register_task(bad)


def test_the_type_checkers_question_is_the_dataclass():
    """common.py writes Question's fields out for the type checker (under TYPE_CHECKING: mypy cannot
    follow make_dataclass); they are the runtime dataclass's, in order, with the same types and defaults."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(common))
    guard = next(
        n
        for n in tree.body
        if isinstance(n, ast.If)
        and ast.unparse(n.test) == "TYPE_CHECKING"
        and any(isinstance(c, ast.ClassDef) and c.name == "Question" for c in n.body)
    )
    stub = next(c for c in guard.body if isinstance(c, ast.ClassDef) and c.name == "Question")
    written = [
        (a.target.id, ast.unparse(a.annotation), a.value is not None and ast.unparse(a.value))
        for a in stub.body
        if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)
    ]

    def annotation(t):
        return t.__name__ if isinstance(t, type) else repr(t).replace("typing.", "")

    made = [
        (f.name, annotation(f.type), "None" if f.default is None else False)
        for f in dataclasses.fields(common.Question)
    ]
    assert written == made
