from datetime import UTC

from django import template
from django.utils import timezone
from django.utils.html import format_html

register = template.Library()


def age_text(seconds: float) -> str:
    """ "4 s ago", "3 min ago", "2 h ago", "5 days ago" (static/console/ago.js speaks the same way)."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s ago"
    if s < 7200:
        return f"{s // 60} min ago"
    if s < 172800:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


@register.filter
def ago(value, now=None):
    """An age that keeps counting on the page: `<time data-ago>` is advanced every second by ago.js.

    For times whose growth is the point (a heartbeat, a supervisor pass); other
    times use `|when`.
    """
    if not value:
        return ""
    value = timezone.localtime(value, UTC) if timezone.is_aware(value) else value
    now = now or timezone.now()
    return format_html(
        '<time datetime="{}" title="{}" data-ago>{}</time>',
        value.isoformat(),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        age_text((now - value).total_seconds()),
    )


@register.filter
def seconds(value) -> str:
    """A duration in seconds as people read it: "12 ms", "1.4 s", "3 min"."""
    if value is None:
        return ""
    v = float(value)
    if v < 1:
        return f"{v * 1000:.0f} ms"
    if v < 120:
        return f"{v:.1f} s".replace(".0 s", " s")
    return f"{v / 60:.0f} min"


@register.filter
def on_date(value):
    """A day as people read it ("3 Jan 2026") inside `<time datetime title>`."""
    if not value:
        return ""
    value = timezone.localtime(value, UTC) if timezone.is_aware(value) else value
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        f"{value.day} {value:%b %Y}",
    )


@register.filter
def lease_end(value, now=None):
    """ "lease ends in 2 minutes" / "lease ended 3 minutes ago": when a run's lease runs out, as a sentence
    (never "lease until in 2 minutes")."""
    from console.templatetags.console_tags import when

    if not value:
        return ""
    verb = "lease ends" if value > (now or timezone.now()) else "lease ended"
    return format_html("{} {}", verb, when(value))
