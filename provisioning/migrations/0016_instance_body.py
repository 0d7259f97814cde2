# The instance list's read model (provisioning.models.InstanceBody, provisioning/body_cache.py): one row per
# instance, made with it, and triggers that mark the kept body stale in the writer's own transaction whenever
# something it shows changes. A trigger cannot be forgotten by a new code path the way a Python hook could:
# every writer (services, the admin, bulk updates, raw SQL) goes through them. They only ever UPDATE existing
# rows: an instance being deleted (its groups first) must not get its row back.

import django.db.models.deletion
from django.db import migrations, models

# The columns of each table the kept body is built from (the instance's per-row figures are never kept).
INSTANCE_COLUMNS = ("name", "kind", "state", "state_reason", "items", "policy", "zone_id", "image", "images",
                    "billing", "package_renewal", "waitlist", "created_at", "ready_at", "price_per_hour",
                    "sla_deadline", "sla_event_id", "sla_settled_event_id", "sla_compensation", "organization_id")
GROUP_COLUMNS = ("instance_id", "item_index", "accelerator", "card_indices", "state", "node_id", "ssh_port",
                 "released_at")
NODE_COLUMNS = ("hostname", "ssh_host", "ssh_port", "card_count", "accelerator_id")


def _changed(columns):
    return f"({', '.join('OLD.' + c for c in columns)}) IS DISTINCT FROM ({', '.join('NEW.' + c for c in columns)})"


STALE = "UPDATE provisioning_instancebody SET version = version + 1, body = NULL WHERE instance_id"
FORWARD = f"""
CREATE FUNCTION provisioning_instancebody_made() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO provisioning_instancebody (instance_id, version, format, body)
  SELECT id, 0, '', NULL FROM made ON CONFLICT (instance_id) DO NOTHING;
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_made AFTER INSERT ON provisioning_instance
  REFERENCING NEW TABLE AS made FOR EACH STATEMENT EXECUTE FUNCTION provisioning_instancebody_made();

CREATE FUNCTION provisioning_instancebody_instance() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {STALE} = NEW.id;
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_instance AFTER UPDATE ON provisioning_instance
  FOR EACH ROW WHEN ({_changed(INSTANCE_COLUMNS)}) EXECUTE FUNCTION provisioning_instancebody_instance();

CREATE FUNCTION provisioning_instancebody_group() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' THEN
    {STALE} = OLD.instance_id;
  END IF;
  IF TG_OP <> 'DELETE' AND (TG_OP = 'INSERT' OR NEW.instance_id <> OLD.instance_id) THEN
    {STALE} = NEW.instance_id;
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_group_insert_delete AFTER INSERT OR DELETE ON provisioning_nodegroup
  FOR EACH ROW EXECUTE FUNCTION provisioning_instancebody_group();
CREATE TRIGGER instancebody_group_update AFTER UPDATE ON provisioning_nodegroup
  FOR EACH ROW WHEN ({_changed(GROUP_COLUMNS)}) EXECUTE FUNCTION provisioning_instancebody_group();

CREATE FUNCTION provisioning_instancebody_node() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {STALE} IN (SELECT g.instance_id FROM provisioning_nodegroup g WHERE g.node_id = NEW.id AND g.released_at IS NULL);
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_node AFTER UPDATE ON inventory_node
  FOR EACH ROW WHEN ({_changed(NODE_COLUMNS)}) EXECUTE FUNCTION provisioning_instancebody_node();

CREATE FUNCTION provisioning_instancebody_zone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {STALE} IN (SELECT i.id FROM provisioning_instance i WHERE i.zone_id = NEW.id);
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_zone AFTER UPDATE ON inventory_zone
  FOR EACH ROW WHEN (OLD.slug IS DISTINCT FROM NEW.slug) EXECUTE FUNCTION provisioning_instancebody_zone();

CREATE FUNCTION provisioning_instancebody_accelerator() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {STALE} IN (SELECT g.instance_id FROM provisioning_nodegroup g JOIN inventory_node n ON n.id = g.node_id
              WHERE n.accelerator_id = NEW.id AND g.released_at IS NULL);
  RETURN NULL;
END $$;
CREATE TRIGGER instancebody_accelerator AFTER UPDATE ON inventory_accelerator
  FOR EACH ROW WHEN (OLD.vendor IS DISTINCT FROM NEW.vendor) EXECUTE FUNCTION provisioning_instancebody_accelerator();

INSERT INTO provisioning_instancebody (instance_id, version, format, body)
SELECT id, 0, '', NULL FROM provisioning_instance ON CONFLICT (instance_id) DO NOTHING;
"""
BACKWARD = """
DROP TRIGGER IF EXISTS instancebody_made ON provisioning_instance;
DROP TRIGGER IF EXISTS instancebody_instance ON provisioning_instance;
DROP TRIGGER IF EXISTS instancebody_group_insert_delete ON provisioning_nodegroup;
DROP TRIGGER IF EXISTS instancebody_group_update ON provisioning_nodegroup;
DROP TRIGGER IF EXISTS instancebody_node ON inventory_node;
DROP TRIGGER IF EXISTS instancebody_zone ON inventory_zone;
DROP TRIGGER IF EXISTS instancebody_accelerator ON inventory_accelerator;
DROP FUNCTION IF EXISTS provisioning_instancebody_made(), provisioning_instancebody_instance(),
  provisioning_instancebody_group(), provisioning_instancebody_node(), provisioning_instancebody_zone(),
  provisioning_instancebody_accelerator();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('provisioning', '0015_merge_20261203_1329'),
        ('inventory', '0014_placement_changes_index_only'),
    ]

    operations = [
        migrations.CreateModel(
            name='InstanceBody',
            fields=[
                ('instance', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='body_cache', serialize=False, to='provisioning.instance')),
                ('version', models.BigIntegerField(default=0)),
                ('format', models.CharField(blank=True, max_length=64)),
                ('body', models.TextField(blank=True, null=True)),
            ],
        ),
        migrations.RunSQL([FORWARD], [BACKWARD]),  # in lists: each script sent whole, not split at semicolons
    ]
