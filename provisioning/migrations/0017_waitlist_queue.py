# The waitlist's queues, for the instance list's positions (provisioning/selectors.py): each instance's waitlist
# shape (selectors.waitlist_shape: kind, zone, accelerators and counts — or the policy) kept as a generated column,
# and each queue in FIFO order in a partial index. A page's positions then come from a walk of the queues its
# waitlisted rows are in, not from computing every waitlisted instance's shape on every read. The column is
# generated from the row, never written by Django: the model does not name it.

from django.db import migrations

FORWARD = """
CREATE FUNCTION cardmix_waitlist_shape(kind text, zone uuid, items jsonb, policy jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT md5(kind || '|' || COALESCE(zone::text, '') || '|' || (
    CASE WHEN jsonb_typeof(items) = 'array' AND items <> '[]'::jsonb
      THEN (SELECT jsonb_agg(jsonb_build_array(e->'accelerator', e->'count') ORDER BY e->'accelerator', e->'count')
            FROM jsonb_array_elements(items) e)
      ELSE jsonb_build_array('policy', policy->'total_cards',
        (SELECT jsonb_agg(v ORDER BY v) FROM jsonb_array_elements(
           CASE WHEN jsonb_typeof(policy->'compatible_vendors') = 'array' THEN policy->'compatible_vendors'
                ELSE '[]'::jsonb END) v),
        policy->'min_domestic_share') END)::text)
$$;
ALTER TABLE provisioning_instance ADD COLUMN waitlist_shape text
  GENERATED ALWAYS AS (cardmix_waitlist_shape(kind, zone_id, items, policy)) STORED;
CREATE INDEX instance_waitlist_queue ON provisioning_instance (waitlist_shape, waitlisted_at, created_at, id)
  WHERE state = 'waitlisted';
"""
BACKWARD = """
DROP INDEX IF EXISTS instance_waitlist_queue;
ALTER TABLE provisioning_instance DROP COLUMN IF EXISTS waitlist_shape;
DROP FUNCTION IF EXISTS cardmix_waitlist_shape(text, uuid, jsonb, jsonb);
"""


class Migration(migrations.Migration):

    dependencies = [
        ('provisioning', '0016_instance_body'),
    ]

    operations = [
        migrations.RunSQL([FORWARD], [BACKWARD]),  # in lists: each script sent whole, not split at semicolons
    ]
