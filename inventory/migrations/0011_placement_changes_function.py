# The read of the placement change log as one PL/pgSQL function (inventory.selectors.placement_changes).
#
# As one ad-hoc statement it was planned on every decision (0.7 ms) and joined the changed nodes to the
# whole node table (a sequential scan: 1.5 ms at 10k nodes). A PL/pgSQL function keeps its statements'
# plans for the session, and looks the changed nodes up by primary key; declared STABLE, all its
# statements read the calling statement's snapshot, as the single statement did.

from django.db import migrations

FUNCTION = r"""
CREATE OR REPLACE FUNCTION inventory_placement_changes(
    p_last bigint, p_pending bigint[], p_also uuid[], p_ok text, p_retired text,
    OUT last_id bigint, OUT pending bigint[], OUT changed uuid[], OUT own uuid[], OUT rebuild boolean,
    OUT nodes json)
LANGUAGE plpgsql STABLE AS $fn$
DECLARE
    me bigint := pg_current_xact_id_if_assigned()::text::bigint;
BEGIN
    -- The mark: the highest row this snapshot sees, and the transactions still writing (their rows may lie
    -- below it), this one included.
    SELECT coalesce(max(id), 0) INTO last_id FROM inventory_placementchange;
    pending := ARRAY(SELECT x::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) AS x) || me;
    changed := ARRAY(SELECT node_id FROM inventory_placementchange
                      WHERE (id > p_last OR xid = ANY(p_pending)) AND node_id IS NOT NULL
                     UNION SELECT unnest(p_also));
    IF me IS NULL THEN
        own := '{}';
    ELSE
        own := ARRAY(SELECT DISTINCT node_id FROM inventory_placementchange
                      WHERE xid = me AND node_id IS NOT NULL);
    END IF;
    rebuild := EXISTS(SELECT 1 FROM inventory_placementchange
                       WHERE (id > p_last OR xid = ANY(p_pending)) AND horizon IS NOT NULL
                         AND (horizon > p_last OR horizon_xid >= ANY(p_pending)));
    IF cardinality(changed) = 0 THEN
        nodes := '[]';
        RETURN;
    END IF;
    SELECT coalesce(json_agg(json_build_object(
               'id', n.id, 'zone', z.slug, 'accelerator', a.slug, 'card_count', n.card_count, 'state', n.state,
               'free', ARRAY(SELECT c.index FROM inventory_card c WHERE c.node_id = n.id AND c.health = p_ok
                              AND NOT EXISTS (SELECT 1 FROM inventory_cardallocation al
                                               WHERE al.card_id = c.id AND al.released_at IS NULL)))), '[]')
      INTO nodes
      FROM inventory_node n JOIN inventory_zone z ON z.id = n.zone_id
      JOIN inventory_accelerator a ON a.id = n.accelerator_id
     WHERE n.id = ANY(changed) AND n.state <> p_retired;
END;
$fn$;
"""

DROP = "DROP FUNCTION IF EXISTS inventory_placement_changes(bigint, bigint[], uuid[], text, text);"


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0010_change_log_beside_ports'),
    ]

    operations = [
        migrations.RunSQL([FUNCTION], [DROP]),  # in lists: each script sent whole, not split at semicolons
    ]
