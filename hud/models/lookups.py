"""`field__any=[...]`: `__in` over a list, sent to PostgreSQL as one array parameter.

A list of n values under `__in` is n placeholders: Django prepares and compiles each, psycopg
splits the query text at each (`_split_query`, ~5 ms per 2,000), and PostgreSQL parses each
literal, where `= ANY(%s)` carries the list as one array, which PostgreSQL plans exactly as
it plans an IN list (the same index conditions). A gate evaluation of 50 backends sends
~10,000 such values. A queryset in place of a list is `= ANY(ARRAY(subquery))` there: the
subquery runs once and its values probe the index, where PostgreSQL may plan `IN (subquery)`
as a join that hashes the whole table (a backend page's failed tests read all of them, 3.6 ms
at 1M jobs and growing with history, against 0.7 ms). SQLite gets the plain `IN`.
"""

from __future__ import annotations

from django.core.exceptions import EmptyResultSet
from django.db.models import Field, ForeignObject
from django.db.models.fields.related_lookups import RelatedIn
from django.db.models.lookups import In
from django.db.models.sql import Query


class _AsArray:
    def as_postgresql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        if isinstance(self.rhs, Query):  # a queryset
            rhs, rhs_params = self.process_rhs(compiler, connection)  # "(SELECT …)"
            return f"{lhs} = ANY(ARRAY{rhs})", (*lhs_params, *rhs_params)
        if not self.rhs_is_direct_value():  # expressions: as `__in` writes them
            return self.as_sql(compiler, connection)
        field = self.lhs.output_field
        values = [
            field.get_db_prep_value(value, connection, prepared=True)
            for value in dict.fromkeys(self.rhs)
            if value is not None
        ]
        if not values:
            raise EmptyResultSet
        return f"{lhs} = ANY(%s)", (*lhs_params, values)


@Field.register_lookup
class AnyOf(_AsArray, In):
    lookup_name = "any"


@ForeignObject.register_lookup
class RelatedAnyOf(_AsArray, RelatedIn):
    """`__any` on a foreign key (its column, by the target's values)."""

    lookup_name = "any"
