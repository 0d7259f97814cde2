"""Raw SQL migrations that only PostgreSQL runs (triggers, functions, generated columns, partial indexes):
SQLite, the development database, goes without them and the code reads the same things another way."""
from django.db import migrations


def postgresql_only(forward: str, backward: str) -> migrations.RunPython:
    """A migration operation running `forward` (and `backward` to reverse it) on PostgreSQL, nothing elsewhere.
    Each is several statements, possibly with dollar-quoted bodies: run as they are, without parameters."""
    def run(sql):
        def apply(apps, schema_editor):
            if schema_editor.connection.vendor == "postgresql":
                with schema_editor.connection.cursor() as cursor:
                    cursor.execute(sql)
        return apply

    return migrations.RunPython(run(forward), run(backward))
