"""``{% capacity_status as capacity %}``: the latest worker-capacity check (one Redis read;
:func:`fairsched.temporal.capacity.read`), for pages that do not get it from their view (the admin)."""
from django import template

from fairsched.temporal import capacity as _capacity

register = template.Library()


@register.simple_tag
def capacity_status() -> dict:
    return _capacity.read()
