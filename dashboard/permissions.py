"""Who may see the operations dashboard (the views, the socket, the org pages)."""
from __future__ import annotations

VIEW_PERM = "charts.view_chart"


def can_view_dashboard(user) -> bool:
    """Staff with the view (or change) permission on charts."""
    return bool(user and user.is_authenticated and user.is_active and user.is_staff
                and (user.has_perm(VIEW_PERM) or user.has_perm("charts.change_chart")))
