"""The deployment's configuration: Django's settings (settings.py, every value from the environment) and the
ASGI entry daphne serves (asgi.py: HTTP through Django, websockets through console.routing)."""
