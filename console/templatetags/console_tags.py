import json
from datetime import UTC

from django import template
from django.contrib.humanize.templatetags.humanize import naturaltime
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from recovery.words.continue_from import continued_from_text
from recovery.words.runs import fresh_start_text
from tasks.batches import item_position

register = template.Library()


@register.simple_tag(takes_context=True)
def fragment(context, name: str, card: dict):
    """A card's fragment on its page: `{% fragment "console/cards/task.html#header" cards.header %}` renders that
    partial with exactly that context and the page's request, as a live push renders it (`render_to_string`)."""
    return render_to_string(name, card, request=getattr(context, "request", None))


@register.filter
def pretty_json(value, limit: int = 4000) -> str:
    """Arguments and results as people read them: indented JSON, cut at `limit` characters."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "\n… (cut; the API has it whole)"


@register.filter
def when(value):
    """A time as people read it: relative text ("3 minutes ago") inside
    `<time datetime=… title=absolute>`. The one format for times on every page."""
    if not value:
        return ""
    value = timezone.localtime(value, UTC) if timezone.is_aware(value) else value
    return format_html(
        '<time datetime="{}" title="{}" data-relative>{}</time>',
        value.isoformat(),
        value.strftime("%Y-%m-%d %H:%M:%S UTC"),
        naturaltime(value),
    )


@register.filter
def say(line):
    """A presenter Line as HTML: text escaped, moments as `<time>` (see `when`), a person's words quoted."""
    from django.utils.html import conditional_escape
    from django.utils.safestring import mark_safe

    from recovery.words.lines import At, Said

    if not line:
        return ""
    out = []
    for part in line:
        if isinstance(part, At):
            out.append(when(part.when))
        elif isinstance(part, Said):
            out.append(format_html('<q class="said">{}</q>', part.text))
        else:
            out.append(conditional_escape(part))
    return mark_safe("".join(str(p) for p in out))  # noqa: S308 - every part is escaped above


@register.filter
def fresh_start(carry) -> str:
    """How a fresh run (Start over) is named on its card and page; "" for any other run."""
    return fresh_start_text(carry if isinstance(carry, dict) else None)


@register.filter
def continued_from(carry) -> str:
    """How a run started by Continue from step k is named on its page; "" for any other run."""
    return continued_from_text(carry if isinstance(carry, dict) else None)


@register.filter
def step_number(step) -> str:
    """ "3" for a top-level step; "1.2" for the second item (or subagent call) under step 1."""
    if step.parent_seq is None:
        return str(step.seq)
    return f"{step.parent_seq}.{item_position(step.seq, step.parent_seq)}"
