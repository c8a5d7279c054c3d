from django.apps import AppConfig


class FairschedConfig(AppConfig):
    name = "fairsched"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        # Workflow ids name this deployment: a process that did not set its ids (the web,
        # the jobs) reads them from the database the first time it needs one.
        from fairsched import deployment
        from common import workflow_ids

        workflow_ids.set_resolver(deployment.ensure)
