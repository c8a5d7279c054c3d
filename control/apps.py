from django.apps import AppConfig


class ControlConfig(AppConfig):
    name = "control"
    # The label these models always had: tables ``fairsched_*``, migrations ``fairsched.000N``,
    # content types, permissions and admin URLs (``/admin/fairsched/``) stay as they were.
    label = "fairsched"
    verbose_name = "Scheduler"

    def ready(self) -> None:
        # Workflow ids name this deployment: a process that did not set its ids (the web,
        # the jobs) reads them from the database the first time it needs one.
        from common import workflow_ids
        from control import deployment

        workflow_ids.set_resolver(deployment.ensure)
