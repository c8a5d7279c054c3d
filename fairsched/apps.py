from django.apps import AppConfig


class FairschedConfig(AppConfig):
    name = "fairsched"
    verbose_name = "Scheduler"
