"""`field__any_array=[...]`: one array parameter (`= ANY(%s)`) instead of an IN list.

Bulk ticks lock and read tens of thousands of rows by id; an IN list of 40,000 placeholders costs
more to build and parse than the work itself.
"""
from django.db.models import Field, ForeignObject, Lookup


@Field.register_lookup
class AnyArray(Lookup):
    """`lhs = ANY(array)` with the values as one parameter."""

    lookup_name = "any_array"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        field = self.lhs.output_field
        values = [field.get_db_prep_value(v, connection, prepared=False) for v in self.rhs]
        return f"{lhs} = ANY(%s)", [*lhs_params, values]


ForeignObject.register_lookup(AnyArray)  # relations keep their own lookup registry
