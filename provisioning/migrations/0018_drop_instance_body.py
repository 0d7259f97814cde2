# The instance list builds every body from its rows again (provisioning/selectors.py): 0016's read model goes,
# its triggers first, then the functions they call, then the table.
import importlib

from django.db import migrations

DROP = """
DROP TRIGGER instancebody_made ON provisioning_instance;
DROP TRIGGER instancebody_instance ON provisioning_instance;
DROP TRIGGER instancebody_group_insert_delete ON provisioning_nodegroup;
DROP TRIGGER instancebody_group_update ON provisioning_nodegroup;
DROP TRIGGER instancebody_node ON inventory_node;
DROP TRIGGER instancebody_zone ON inventory_zone;
DROP TRIGGER instancebody_accelerator ON inventory_accelerator;
DROP FUNCTION provisioning_instancebody_made(), provisioning_instancebody_instance(),
  provisioning_instancebody_group(), provisioning_instancebody_node(), provisioning_instancebody_zone(),
  provisioning_instancebody_accelerator();
"""
# Backwards, once the table is back: 0016's functions and triggers, and a row for every instance.
RESTORE = importlib.import_module("provisioning.migrations.0016_instance_body").FORWARD


class Migration(migrations.Migration):

    dependencies = [
        ('provisioning', '0017_waitlist_queue'),
    ]

    operations = [
        migrations.RunSQL([DROP], [RESTORE]),  # in lists: each script sent whole, not split at semicolons
        migrations.DeleteModel(name='InstanceBody'),
    ]
