import json

from django import template

register = template.Library()


@register.filter
def pretty_json(value, limit: int = 4000) -> str:
    """Arguments and results as people read them: indented JSON, cut at `limit` characters."""
    try:
        text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "\n… (cut; the API has it whole)"
