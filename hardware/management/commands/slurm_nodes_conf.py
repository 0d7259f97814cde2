"""Print the slurm.conf node lines (`NodeName=… Gres=gpu:8 …`) for the inventory's nodes."""
from django.core.management.base import BaseCommand

from inventory.models import Node

from ...slurm import nodes_conf_lines


class Command(BaseCommand):
    help = "Print NodeName=… Gres=gpu:N / npu:N lines for slurm.conf from the inventory (retired nodes skipped)."

    def add_arguments(self, parser):
        parser.add_argument("--zone", help="only nodes of this zone (slug)")

    def handle(self, *args, zone=None, **options):
        nodes = Node.objects.select_related("accelerator", "zone").order_by("hostname")
        if zone:
            nodes = nodes.filter(zone__slug=zone)
        for line in nodes_conf_lines(nodes):
            self.stdout.write(line)
