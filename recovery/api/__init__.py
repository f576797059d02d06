"""The operator API (API.md): views (views.py), the JSON shapes they return (shapes.py) and the serializers that
describe them to /api/schema/ (schemas.py)."""
