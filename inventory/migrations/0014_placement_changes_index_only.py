# The placement change read (inventory_placement_changes, 0011) runs with sequential scans off and keeps its
# generic plans.
#
# Every statement in it is meant to cost what changed, by index: the log by id, transaction and marker, the
# changed nodes by primary key. Without statistics on the log (a bulk load analyzed empty, autovacuum not round
# yet) the planner chose a sequential scan of the whole log for the marker check: 3.4 ms at 43k rows on every
# decision, for an answer the marker index gives in microseconds. And PL/pgSQL's plan cache kept re-planning its
# five statements on every call (their custom plans looked cheaper than the generic ones): a quarter of the
# function's time; the generic plans are the same index walks. The settings hold only while the function runs.

from django.db import migrations

SIGNATURE = "inventory_placement_changes(bigint, bigint[], uuid[], text, text)"


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0013_placement_change_marker_index'),
    ]

    operations = [
        migrations.RunSQL(f"ALTER FUNCTION {SIGNATURE} SET enable_seqscan = off",
                          f"ALTER FUNCTION {SIGNATURE} RESET enable_seqscan"),
        migrations.RunSQL(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_generic_plan",
                          f"ALTER FUNCTION {SIGNATURE} RESET plan_cache_mode"),
    ]
