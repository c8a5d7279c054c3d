from django.apps import AppConfig


class FairschedConfig(AppConfig):
    """The app that installs the commands (``fairsched/management/``): no models.

    Its models and their services are the ``control`` app's (label ``fairsched``)."""

    name = "fairsched"
    label = "fairsched_commands"
    verbose_name = "Scheduler commands"
