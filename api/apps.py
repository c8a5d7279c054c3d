from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "api"
    verbose_name = "Producer API"

    def ready(self) -> None:
        # Every answered request counts in fairsched_api_requests_total{endpoint, code}
        # (docs/metrics.md): the API's one hook feeds the metrics' Redis counter.
        from api import hooks
        from common import metrics

        hooks.connect(metrics.api_request_done)
