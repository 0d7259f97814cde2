"""`field__any_array=[...]`: one array parameter (`= ANY(%s)`) on PostgreSQL instead of an IN list.

Bulk ticks lock and read tens of thousands of rows by id; an IN list of 40,000 placeholders costs
more to build and parse than the work itself. Other databases get a plain IN list.
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
        if connection.vendor == "postgresql":
            return f"{lhs} = ANY(%s)", [*lhs_params, values]
        if not values:
            return "1 = 0", list(lhs_params)
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*lhs_params, *values]


ForeignObject.register_lookup(AnyArray)  # relations keep their own lookup registry
