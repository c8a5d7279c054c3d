"""The Prometheus scrape target ``/metrics`` (docs/metrics.md): what it reads
(:mod:`monitoring.sources`), how it renders it (:mod:`monitoring.collector`) and who may
read it (:mod:`monitoring.views`)."""
