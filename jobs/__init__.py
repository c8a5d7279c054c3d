"""Background jobs on django-rq: bulk chart import, signed webhooks, periodic sweeps."""
