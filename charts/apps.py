from django.apps import AppConfig


class ChartsConfig(AppConfig):
    name = "charts"
    verbose_name = "Charts"

    def ready(self) -> None:
        from charts import signals  # noqa: F401  (connects the receivers that notify the scheduler)
