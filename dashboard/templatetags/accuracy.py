"""``{{ seconds|duration }}``: an ETA error for people ("4.2 min", "35 s", "1.3 h"; "—" for none)."""
from __future__ import annotations

from django import template

register = template.Library()


@register.filter
def duration(seconds, mode: str = "") -> str:
    """Seconds as s / min / h; ``"signed"`` adds the sign (bias: + early, − late)."""
    if seconds is None:
        return "—"
    s = float(seconds)
    sign = ("+" if s > 0 else "−" if s < 0 else "") if mode == "signed" else ""
    a = abs(s)
    if a < 90:
        text = f"{a:.0f} s"
    elif a < 5400:
        text = f"{a / 60:.1f} min"
    else:
        text = f"{a / 3600:.1f} h"
    return sign + text
